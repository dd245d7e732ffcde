"""Memory per rank, estimated in the parent before anything launches (no real memory allocated).

The model's parameters are read from a meta-device copy (:class:`ParamShape`: shape, element
size, trainable); each strategy class says how its ranks hold them
(:meth:`dpbench.strategies.base.Strategy.memory_estimate`: parameters, gradients, optimizer
state and communication buffers, one :class:`StateMemory` per worker process, the same count
``memory_per_rank`` has after a run) and what one step adds on top
(:meth:`~dpbench.strategies.base.Strategy.peak_estimate`, from the activation peak of one
forward + backward, :mod:`dpbench.strategies.activations`).

The parameter / gradient / optimizer-state bytes follow the rules the run's
``memory_per_rank`` is measured by (``profiling.memory_report``): a tensor counts the bytes of
its local shard, empty shards count nothing, and every trainable parameter has a gradient after
a step. The optimizer rules are torch's: SGD without momentum keeps no state; AdamW keeps
``exp_avg`` and ``exp_avg_sq`` like the (local) parameter and a float32 ``step`` scalar.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

# The optimizers and precisions the estimator checks (defined in dpbench.schema, named here for its callers).
from dpbench.schema import OPTIMIZERS

__all__ = [
    "ParamShape",
    "StateMemory",
    "model_params",
    "optimizer_state_bytes",
    "full_state",
    "fsdp_local_rows",
    "parse_bytes",
    "format_bytes",
]

# AdamW's step counter: a 0-dim float32 tensor per parameter (torch's _get_scalar_dtype()).
_ADAMW_STEP_BYTES = 4


@dataclass(kw_only=True, frozen=True)
class ParamShape:
    """One parameter as a meta-device model has it: nothing allocated."""

    shape: tuple[int, ...]
    """The full parameter's shape."""

    element_size: int
    """Bytes per element (4 for float32)."""

    trainable: bool
    """``requires_grad``: it gets a gradient and optimizer state."""

    unit: int | None = None
    """Index of the top-level child holding it (FSDP's ``shard="layer"`` units); None: the root."""

    block: int | None = None
    """Index of the model's block holding it (FSDP's ``shard="block"`` units,
    :func:`dpbench.strategies.blocks.find_blocks`); None: outside every block."""

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.element_size


@dataclass(kw_only=True, frozen=True)
class StateMemory:
    """What one worker process holds between steps, in bytes (``memory_per_rank``'s fields)."""

    params_bytes: int
    """Parameters (local shards for sharded strategies)."""

    grads_bytes: int
    """Gradients after a step."""

    optimizer_state_bytes: int
    """Optimizer state (AdamW's moments and step counters; none for plain SGD)."""

    comm_buffer_bytes: int = 0
    """Communication buffers kept between steps (DDP's gradient buckets, allreduce's flat buckets)."""

    def held_bytes(self) -> int:
        return self.params_bytes + self.grads_bytes + self.optimizer_state_bytes + self.comm_buffer_bytes

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


def model_params(model: Any, blocks: Sequence[Any] = ()) -> tuple[ParamShape, ...]:
    """The parameters of ``model`` (tied ones once, as ``model.parameters()`` yields them), each
    tagged with the top-level child and the block (of ``blocks``) that holds it."""

    def owners(modules: Any) -> dict[int, int]:
        found: dict[int, int] = {}
        index = 0
        for module in modules:
            owned = list(module.parameters())
            if owned:
                for p in owned:
                    found.setdefault(id(p), index)
                index += 1
        return found

    units, in_block = owners(model.children()), owners(blocks)
    return tuple(
        ParamShape(
            shape=tuple(p.shape),
            element_size=p.element_size(),
            trainable=p.requires_grad,
            unit=units.get(id(p)),
            block=in_block.get(id(p)),
        )
        for p in model.parameters()
    )


def optimizer_state_bytes(optimizer: str, local_bytes: int) -> int:
    """State bytes ``optimizer`` keeps for one trainable parameter whose local part has ``local_bytes``."""
    if optimizer == "sgd":
        return 0  # no momentum: torch's SGD stores no buffer
    if optimizer == "adamw":
        return 2 * local_bytes + _ADAMW_STEP_BYTES
    raise ValueError(f"optimizer: expected one of {', '.join(OPTIMIZERS)}, found {optimizer!r}")


def full_state(params: Sequence[ParamShape], optimizer: str, *, comm_buffer_bytes: int = 0) -> StateMemory:
    """A worker holding every parameter whole, a gradient for each trainable one and its full state."""
    trainable = [p for p in params if p.trainable]
    return StateMemory(
        params_bytes=sum(p.nbytes for p in params),
        grads_bytes=sum(p.nbytes for p in trainable),
        optimizer_state_bytes=sum(optimizer_state_bytes(optimizer, p.nbytes) for p in trainable),
        comm_buffer_bytes=comm_buffer_bytes,
    )


def fsdp_local_rows(rows: int, world_size: int, rank: int) -> int:
    """Rows of a dim-0 shard on ``rank``: ``torch.chunk``'s split (ceil-sized chunks, the last ones
    shorter or empty), which FSDP2's ``Shard(0)`` placement uses."""
    chunk = -(-rows // world_size)
    return max(0, min(chunk, rows - rank * chunk))


_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


def parse_bytes(text: str, *, argument: str = "device memory") -> int:
    """``"80GB"`` (10⁹), ``"80 GiB"`` (2³⁰), ``"8e10"`` (bytes) → an int; anything else raises one line."""
    import re

    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS or float(match.group(1)) <= 0:
        raise ValueError(f"{argument}: expected a positive size such as 80GB, 80 GiB or 8e10 (bytes), found {text!r}")
    return int(float(match.group(1)) * _UNITS[unit])


def format_bytes(n: int | None) -> str:
    """``n`` bytes in GiB / MiB / KiB, three significant figures (``-`` for None)."""
    if n is None:
        return "-"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} B"
