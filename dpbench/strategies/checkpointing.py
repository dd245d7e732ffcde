"""Activation checkpointing per block, as torchtitan applies it before sharding: each block's
forward runs under ``torch.utils.checkpoint`` (non-reentrant), so backward recomputes the block's
activations instead of keeping them. The blocks are :func:`dpbench.strategies.blocks.find_blocks`'s.

A block gets it by a class swap, not a wrapper module: the swapped class keeps the block's name,
parameters and their names (a wrapper would rename every parameter under it), and a replica that
``DataParallel`` copies from it checkpoints too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dpbench.strategies.blocks import find_blocks

__all__ = ["check_checkpointable", "checkpoint_blocks"]

# One checkpointing subclass per block class, made once per process.
_SUBCLASSES: dict[type, type] = {}


def checkpoint_blocks(model: Any, names: Sequence[str] = ()) -> list[Any]:
    """Checkpoint every block of ``model`` (``names``: their classes, else detected); the blocks.
    A model without a block is a ValueError: there is nothing to recompute one by one."""
    blocks, _ = find_blocks(model, names)
    if not blocks:
        raise ValueError(
            "checkpoint: the model has no blocks to recompute (no repeated composite modules, no "
            "_no_split_modules); name them with Workload(blocks=('MyBlock',))"
        )
    for block in blocks:
        block.__class__ = _checkpointing(type(block))
    return blocks


def check_checkpointable(workload: Any) -> None:
    """Refuse, before any process starts, checkpointing a workload whose model has no blocks (the
    model built on the meta device: nothing allocated). A model that cannot be built there is left
    to its launch."""
    import torch

    try:
        with torch.device("meta"):
            model = workload.model()
    except Exception:  # noqa: BLE001 - not buildable on meta: the workers build it and say so
        return
    checkpoint_blocks(model, getattr(workload, "blocks", ()))


def _checkpointing(cls: type) -> type:
    if cls in _SUBCLASSES.values():
        return cls
    if cls not in _SUBCLASSES:

        def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
            from torch.utils.checkpoint import checkpoint

            return checkpoint(super(subclass, self).forward, *args, use_reentrant=False, **kwargs)

        subclass = type(cls.__name__, (cls,), {"forward": forward, "__qualname__": cls.__qualname__})
        subclass.__module__ = cls.__module__
        _SUBCLASSES[cls] = subclass
    return _SUBCLASSES[cls]
