"""The Workload: what every strategy trains — a model factory, a batch factory and a loss."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from dpbench.workloads._validate import check_parts, function_name, json_params, main_references, tensor_rows
from dpbench.workloads.main_module import GUARD, definition_is_guarded, main_is_reimported

__all__ = ["Workload", "ModelFactory", "BatchFactory", "LossFn", "check_picklable", "check_first_batch"]

ModelFactory = Callable[[], nn.Module]
# batch(step, global_batch, seed) -> (inputs, target): the full global batch of that step.
BatchFactory = Callable[[int, int, int], tuple[Any, Any]]
LossFn = Callable[[Any, Any], torch.Tensor]


def cross_entropy(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(output, target)


@dataclass(kw_only=True, frozen=True)
class Workload:
    """A model, its data and its loss, identical under every strategy.

    ``model()`` returns a fresh ``nn.Module`` (strategies seed the RNG before calling it so
    every strategy starts from the same weights). ``batch(step, global_batch, seed)``
    returns the *global* ``(inputs, target)`` of that step, deterministic in its arguments;
    each replica or rank takes its slice along dim 0. ``loss(output, target)`` returns a
    scalar. Inputs may be a tensor or a tuple of tensors (passed as positional arguments).
    A workload named by its spec (``module:attr``, ``file.py:attr``) is built again in each worker
    process by importing its module, so its parts may be lambdas or local functions; a ``Workload``
    object handed to a multi-process strategy is pickled instead, and then all three must be
    picklable (module-level functions or ``functools.partial`` of them, not lambdas). ``params``
    records the sizes that define the workload (JSON data, kept as a copy; the factories fill
    it), so results say which variant ran. Parts that cannot be called as described are refused
    here.
    """

    model: ModelFactory
    batch: BatchFactory
    loss: LossFn = cross_entropy
    name: str = "custom"
    description: str = ""
    # True when forward is stochastic or keeps per-replica state (dropout, BatchNorm), so
    # strategies are not expected to match `single` exactly.
    stateful: bool = False
    tags: tuple[str, ...] = field(default_factory=tuple)
    # Not hashed: a dict cannot be, and the name already tells variants apart.
    params: dict[str, Any] = field(default_factory=dict, hash=False)
    # The global batch the suites use for this workload instead of the profile's (None: the
    # profile's); a spec sets it with ``global_batch=N`` where the defaults do not fit the model.
    global_batch: int | None = None
    # The model's repeated blocks by class name (``("DecoderLayer",)``): the units FSDP shards one by
    # one. Empty: found in the model (dpbench.strategies.blocks: a Hugging Face model's
    # _no_split_modules, else its repeated composite modules).
    blocks: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise TypeError(f"Workload.name must be a non-empty str, got {type(self.name).__name__} {self.name!r}")
        if not self.name.strip():
            raise ValueError(f"Workload.name must be a non-empty str, got {self.name!r}")
        check_parts(self)
        object.__setattr__(self, "params", json_params(self.params))
        blocks = (self.blocks,) if isinstance(self.blocks, str) else self.blocks
        if not isinstance(blocks, (tuple, list)) or not all(isinstance(b, str) and b.isidentifier() for b in blocks):
            raise TypeError(f"Workload.blocks must be module class names, e.g. ('DecoderLayer',), got {self.blocks!r}")
        object.__setattr__(self, "blocks", tuple(blocks))

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "stateful": self.stateful,
            "params": dict(self.params),
            "global_batch": self.global_batch,
        }


def check_picklable(workload: Workload) -> None:
    """Raise ``TypeError`` naming the part of ``workload`` that cannot reach the worker processes.

    A part must pickle, and every function or class of ``__main__`` it refers to must be one
    the workers define when they import the main module (see :mod:`dpbench.workloads.main_module`).
    """
    for attr in ("model", "batch", "loss"):
        try:
            references = main_references(getattr(workload, attr))
        except Exception as exc:  # pickle raises several types (PicklingError, AttributeError, TypeError)
            raise TypeError(
                f"Workload.{attr} of workload {workload.name!r} is not picklable, so it cannot be sent to "
                f"worker processes ({type(exc).__name__}: {exc}); define it as a module-level function "
                f"or a functools.partial of one, not a lambda or a local function"
            ) from exc
        for obj in references:
            problem = _unimportable_from_main(obj)
            if problem:
                raise TypeError(f"Workload.{attr} of workload {workload.name!r} refers to {problem}")


def _unimportable_from_main(obj: Any) -> str | None:
    name = obj.__qualname__
    if not main_is_reimported():
        return (
            f"{name}, defined in __main__, but the worker processes cannot import it (this main module "
            f"is no file they run again: python -c, stdin or a notebook); move {name} into a module"
        )
    if definition_is_guarded(name.split(".")[0]):
        return (
            f"{name}, defined under `{GUARD}`; the worker processes import the main module without "
            f"running that block, so they cannot find it: define {name} at module level, above the guard"
        )
    return None


def check_first_batch(workload: Workload, *, global_batch: int, seed: int) -> None:
    """Build step 0's batch here and check that every tensor in it has ``global_batch`` rows.

    Run before any worker starts: a short batch would otherwise fail deep in one rank's slice.
    Batch functions build CPU tensors, so this touches no accelerator.
    """
    name = function_name(workload.batch)
    where = f"Workload.batch of workload {workload.name!r}: {name}"
    try:
        result = workload.batch(0, global_batch, seed)
    except Exception as exc:
        exc.add_note(f"(raised by {where} while dpbench built the first batch to check its size)")
        raise
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise TypeError(f"{where} returned {type(result).__name__}, expected an (inputs, target) pair")
    for part, value in zip(("inputs", "target"), result):
        for path, rows in tensor_rows(value, part):
            if rows != global_batch:
                found = "a 0-dim tensor (no rows)" if rows is None else f"{rows} rows"
                raise ValueError(
                    f"{where} returned {found} in {path} for global_batch={global_batch} (step 0, seed {seed}); "
                    f"every tensor in inputs and target needs global_batch rows along dim 0"
                )
