"""The public API: measurements (and a stated link) → a :class:`CollectiveModel` → a
:class:`CollectivePrediction` per collective, message size and world size.

    >>> model = fit_collectives(read_measurements(["nccl_8.log"], collective="all_reduce"),
    ...                         link=parse_link("inter=25GB/s"), gpus_per_node=8)   # doctest: +SKIP
    >>> model.predict("all_reduce", 1 << 30, 16).time_us                          # doctest: +SKIP

A later step model asks :meth:`CollectiveModel.time_us` for each collective it schedules.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass

from dpbench.errors import UsageError
from dpbench.predict.measurements import Measurement
from dpbench.predict.model import INTER, INTRA, Link, TierFit, fit_tier, stated_tier

__all__ = ["CollectiveModel", "CollectivePrediction", "fit_collectives", "predict_collectives"]


@dataclass(kw_only=True, frozen=True)
class CollectivePrediction:
    """One predicted call: a collective of one size among one group, its interval, the measurement if any."""

    collective: str
    """The collective."""
    bytes: int
    """The message size (as nccl-tests counts it)."""
    world_size: int
    """Ranks in the group."""
    nodes: int
    """Nodes the group spans at the model's GPUs per node."""
    tier: str
    """The tier that timed it: ``intra`` or ``inter``."""
    time_us: float
    """The predicted time per call, µs."""
    lo_us: float
    """The 95% prediction interval's lower end, µs."""
    hi_us: float
    """Its upper end, µs."""
    measured_us: float | None
    """The measured time at this size and world size (the median when measured more than once), or None."""

    @property
    def error(self) -> float | None:
        """(predicted − measured) / measured, or None without a measurement."""
        return None if self.measured_us is None else self.time_us / self.measured_us - 1.0


@dataclass(kw_only=True, frozen=True)
class CollectiveModel:
    """The fitted tiers of every collective measured, and how ranks sit on nodes."""

    tiers: tuple[TierFit, ...]
    """One per collective and tier that measurements or the stated link give."""
    gpus_per_node: int
    """GPUs per node: a group larger than this spans nodes (the inter tier)."""
    gpus_per_node_origin: str
    """Where ``gpus_per_node`` came from: the option, or the measurements' device lines."""
    link: Link | None = None
    """The stated link, if any."""
    notes: tuple[str, ...] = ()
    """What the fit left out and why (world size 1 moves nothing between ranks)."""
    backends: tuple[str, ...] = ()
    """The libraries that ran the measurements (``nccl``, ``gloo``); empty: none recorded, or a stated link alone."""

    def collectives(self) -> list[str]:
        """The collectives the model can time."""
        return sorted({t.collective for t in self.tiers})

    def tier(self, collective: str, world_size: int) -> TierFit:
        """The tier that times ``collective`` among ``world_size`` ranks; a UsageError when none can."""
        if collective not in self.collectives():
            raise UsageError(
                f"{collective}: no measurement of it: expected one of {', '.join(self.collectives())}, "
                "or measurements of it in --from"
            )
        want = INTRA if world_size <= self.gpus_per_node else INTER
        for fit in self.tiers:
            if fit.collective == collective and fit.tier == want:
                return fit
        if want == INTER:
            nodes = math.ceil(world_size / self.gpus_per_node)
            raise UsageError(
                f"world size {world_size}: spans {nodes} nodes of {self.gpus_per_node} GPUs, and the {collective} "
                "measurements are all inside one node: expected measurements across nodes in --from, or the "
                "link between nodes stated, e.g. --link inter=25GB/s"
            )
        raise UsageError(
            f"world size {world_size}: inside one node, and the {collective} measurements are all across nodes: "
            "expected measurements inside a node in --from, or the link stated, e.g. --link intra=450GB/s"
        )

    def time_us(self, collective: str, nbytes: float, world_size: int) -> float:
        """The predicted time of one call, µs (world size 1: no communication, 0)."""
        if world_size == 1:
            return 0.0
        return self.tier(collective, world_size).time_us(nbytes, world_size)

    def predict(
        self, collective: str, nbytes: int, world_size: int, *, measured_us: float | None = None
    ) -> CollectivePrediction:
        """The prediction of one call, with its 95% interval (and ``measured_us`` beside it)."""
        fit = self.tier(collective, world_size)
        lo, hi = fit.interval_us(nbytes, world_size)
        return CollectivePrediction(
            collective=collective,
            bytes=int(nbytes),
            world_size=world_size,
            nodes=math.ceil(world_size / self.gpus_per_node),
            tier=fit.tier,
            time_us=fit.time_us(nbytes, world_size),
            lo_us=lo,
            hi_us=hi,
            measured_us=measured_us,
        )


def fit_collectives(
    measurements: list[Measurement], *, link: Link | None = None, gpus_per_node: int | None = None
) -> CollectiveModel:
    """Fit every collective's tiers that the measurements cover; fill the others from ``link``.

    A measurement inside one node fits the intra tier, one across nodes the inter tier. Without
    ``gpus_per_node`` it is the most ranks the measurements saw on one node."""
    if gpus_per_node is not None and gpus_per_node < 1:
        raise UsageError(f"--gpus-per-node: expected a positive integer, found {gpus_per_node}")
    if not measurements and link is None:
        raise UsageError("--from: expected nccl-tests logs or saved comm-suite runs, found none")
    notes = []
    alone = sorted({m.source for m in measurements if m.world_size == 1})
    if alone:
        notes.append(f"left out world size 1 (no data moves between ranks): {', '.join(alone)}")
    groups: dict[tuple[str, str], list[Measurement]] = defaultdict(list)
    for m in measurements:
        if m.world_size > 1:
            groups[m.collective, INTER if m.nodes > 1 else INTRA].append(m)
    if gpus_per_node is None:
        if not measurements:
            raise UsageError("--gpus-per-node: expected it with --link alone (no measurements say how many)")
        gpus_per_node = max(m.ranks_per_node for m in measurements)
        origin = "the most ranks on one node in the measurements' device lines"
    else:
        origin = "--gpus-per-node"
    tiers = [fit_tier(ms, collective=c, tier=t) for (c, t), ms in sorted(groups.items())]
    if link is not None:
        named = {m.collective for m in measurements} or {"all_reduce", "all_gather", "reduce_scatter", "broadcast"}
        for collective in sorted(named):
            fitted = {t.tier: t for t in tiers if t.collective == collective}
            for tier in (INTRA, INTER):
                if tier not in fitted:
                    made = stated_tier(
                        collective=collective,
                        tier=tier,
                        link=link,
                        gpus_per_node=gpus_per_node,
                        intra=fitted.get(INTRA),
                    )
                    if made is not None:
                        tiers.append(made)
                        fitted[tier] = made
    return CollectiveModel(
        tiers=tuple(tiers),
        gpus_per_node=gpus_per_node,
        gpus_per_node_origin=origin,
        link=link,
        notes=tuple(notes),
        backends=tuple(sorted({m.backend for m in measurements if m.backend})),
    )


def predict_collectives(
    model: CollectiveModel, measurements: list[Measurement], world_sizes: list[int], *, sizes: list[int] | None = None
) -> list[CollectivePrediction]:
    """Every collective × message size × world size: the sizes measured for that collective (or
    ``sizes``), at each world size, with the measured time beside where there is one."""
    if not world_sizes or any(n < 1 for n in world_sizes):
        raise UsageError(f"--world-sizes: expected positive integers, found {world_sizes}")
    measured: dict[tuple[str, int, int], list[float]] = defaultdict(list)
    for m in measurements:
        measured[m.collective, m.bytes, m.world_size].append(m.time_us)
    out = []
    for collective in model.collectives():
        wanted = sorted(set(sizes) if sizes else {m.bytes for m in measurements if m.collective == collective})
        for n in world_sizes:
            if n == 1:
                continue
            for nbytes in wanted:
                times = measured.get((collective, nbytes, n))
                out.append(
                    model.predict(collective, nbytes, n, measured_us=statistics.median(times) if times else None)
                )
    return out
