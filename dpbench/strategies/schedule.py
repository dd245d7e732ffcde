"""What one training step of a strategy issues, declared by the strategy before anything runs:
its gradient synchronisation (flat buckets all-reduced, or sharded units gathered and
reduce-scattered), its micro-batches, what it broadcasts, what it shards — torch-free, as the
memory estimate is (:mod:`dpbench.strategies.memory`).

Each strategy class says it in :meth:`dpbench.strategies.base.Strategy.step_schedule` from its
options dataclass (None: no schedule, the step is not replayed — the in-process strategies);
:func:`dpbench.strategies.step_schedule` looks it up by name for a case's saved options. The step model
(:mod:`dpbench.predict.step`) replays whatever schedule it is given, knowing no strategy's name.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BucketSync", "ShardedUnits", "StepSchedule"]


@dataclass(kw_only=True, frozen=True)
class BucketSync:
    """Gradients all-reduced in flat buckets cut from the parameter bytes in the order backward
    makes them ready (DDP's reducer, the allreduce strategy's buckets); every rank holds them whole."""

    first_bytes: int | None
    """The first bucket's cap (DDP keeps it small so the first all-reduce starts early); None: as the rest."""
    cap_bytes: int
    """Every other bucket's cap, bytes."""
    overlap: bool
    """Each bucket all-reduced as soon as backward has made it ready, overlapping the rest of
    backward; False: every bucket after backward."""

    def collectives(self) -> tuple[str, ...]:
        """The collectives the gradients' sync issues."""
        return ("all_reduce",)


@dataclass(kw_only=True, frozen=True)
class ShardedUnits:
    """Parameters sharded in units (FSDP's ``fully_shard`` units, the root last): per unit an
    all-gather in forward, prefetched one unit ahead; in backward, when it resharded, a second
    all-gather (the next unit's prefetched as a unit's backward starts) and a reduce-scatter of its
    gradients. With replica groups (HSDP) the gathers and reduce-scatters run inside a shard group
    of world size ÷ ``replicate`` ranks, then the shard is all-reduced across the groups."""

    gathers_in_backward: bool
    """Backward gathers each unit again (it freed its parameters after forward)."""
    replicate: int
    """Replica groups (HSDP); 1: every rank in one shard group."""

    def collectives(self) -> tuple[str, ...]:
        """The collectives the units' sync issues."""
        base = ("all_gather", "reduce_scatter")
        return base + ("all_reduce",) if self.replicate > 1 else base


@dataclass(kw_only=True, frozen=True)
class StepSchedule:
    """What one step of a strategy issues, at any world size (see the module doc)."""

    gradients: BucketSync | ShardedUnits
    """How the gradients are synchronised."""
    micro_batches: int = 1
    """Forward and backward passes per step, all but the last sending nothing (gradient accumulation)."""
    buffer_broadcast: bool = False
    """Rank 0's buffers (BatchNorm statistics) broadcast before the step's first forward, which waits for it."""
    sharded_optimizer: bool = False
    """Each rank steps 1/world size of the parameters (its partition or its shard)."""
    partition_broadcast: bool = False
    """After its optimizer step every rank broadcasts its 1/world size partition of the parameters."""
    fused_compute: bool = False
    """Forward and backward are timed as one phase (``compute``), to be split 1:2 where the replay
    needs them apart; False: ``forward`` and ``backward`` are timed apart."""
    calibrates_overlap: bool = False
    """Its multi-rank cases, with their compute-only step and collectives replayed alone, are the
    ones the overlap slowdown is fitted on (one schedule for every fit)."""
    notes: tuple[str, ...] = ()
    """What a replay of it assumes, one line each (a forecast's notes)."""

    def __post_init__(self) -> None:
        if isinstance(self.gradients, ShardedUnits) and (self.micro_batches != 1 or self.buffer_broadcast):
            raise ValueError(
                "step schedule: sharded units are replayed with one micro-batch and no buffer broadcast, "
                f"found micro_batches={self.micro_batches}, buffer_broadcast={self.buffer_broadcast}"
            )

    def collectives(self, *, buffer_bytes: int | None) -> tuple[str, ...]:
        """The collectives one step issues (the buffers' broadcast only where there are buffer bytes)."""
        sends_buffers = self.buffer_broadcast and bool(buffer_bytes)
        if self.partition_broadcast or sends_buffers:
            return self.gradients.collectives() + ("broadcast",)
        return self.gradients.collectives()
