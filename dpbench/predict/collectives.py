"""The public API: measurements (and a stated link) → a :class:`CollectiveModel` → a
:class:`CollectivePrediction` per collective, message size and world size.

Where the measurements hold that collective at that world size, the prediction is the measurement
(interpolated in log size and log time between the sizes measured); the fitted form only carries
it beyond them: to other sizes, world sizes and node counts. A collective without measurements of
its own is timed from all_reduce's fit (a ring all-reduce is a reduce-scatter then an all-gather).
Each prediction says which (:class:`Basis`).

    >>> model = fit_collectives(read_measurements(["nccl_8.log"], collective="all_reduce"),
    ...                         link=parse_link("inter=25GB/s"), gpus_per_node=8)   # doctest: +SKIP
    >>> model.predict("all_reduce", 1 << 30, 16).time_us                          # doctest: +SKIP

A later step model asks :meth:`CollectiveModel.time_us` for each collective it schedules.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from enum import Enum

from dpbench.errors import UsageError
from dpbench.predict.measurements import Measurement
from dpbench.predict.model import INTER, INTRA, Link, TierFit, bus_factor, fit_tier, stated_tier

__all__ = [
    "Basis",
    "CollectiveModel",
    "CollectivePrediction",
    "MeasuredCurve",
    "fit_collectives",
    "predict_collectives",
]


class Basis(str, Enum):
    """What a prediction rests on (saved in the JSON as its value)."""

    MEASURED = "measured"
    """Measured at this size and world size."""
    INTERPOLATED = "interpolated"
    """Between two sizes measured at this world size (log size, log time)."""
    FITTED = "fitted"
    """The form fitted on measurements of this collective, carried to this size or world size."""
    FROM_ALL_REDUCE = "from all_reduce"
    """Not measured: all_reduce's tier with this collective's hops and bus factor."""
    STATED = "stated link"
    """The tier built from a stated link (and the intra fit's latency)."""


@dataclass(kw_only=True, frozen=True)
class MeasuredCurve:
    """One collective measured at one world size: time per size (the median where measured twice)."""

    collective: str
    """The collective."""
    world_size: int
    """Ranks in the group."""
    sizes: tuple[int, ...]
    """Message sizes measured, ascending."""
    times_us: tuple[float, ...]
    """The time at each, µs."""
    lows_us: tuple[float, ...]
    """The fastest of the measurements at each size (the time itself where measured once)."""
    highs_us: tuple[float, ...]
    """The slowest."""
    sources: tuple[str, ...]
    """The files it came from."""

    def time_us(self, nbytes: float) -> tuple[float, float, float, Basis] | None:
        """(time, low, high, basis) at ``nbytes``: measured, or interpolated in log size and log time
        between the two sizes around it; None outside the sizes measured."""
        if not self.sizes or nbytes < self.sizes[0] or nbytes > self.sizes[-1]:
            return None
        i = bisect.bisect_left(self.sizes, nbytes)
        if self.sizes[i] == nbytes:
            return self.times_us[i], self.lows_us[i], self.highs_us[i], Basis.MEASURED
        b0, b1 = self.sizes[i - 1], self.sizes[i]
        # a 0-byte row: linear in size to the next
        w = nbytes / b1 if b0 <= 0 else math.log(nbytes / b0) / math.log(b1 / b0)

        def between(values: tuple[float, ...]) -> float:
            return math.exp((1 - w) * math.log(values[i - 1]) + w * math.log(values[i]))

        return between(self.times_us), between(self.lows_us), between(self.highs_us), Basis.INTERPOLATED


def measured_curves(measurements: list[Measurement]) -> tuple[MeasuredCurve, ...]:
    """The measurements per collective and world size, as curves over message size."""
    times: dict[tuple[str, int], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    sources: dict[tuple[str, int], set[str]] = defaultdict(set)
    for m in measurements:
        if m.world_size > 1:
            times[m.collective, m.world_size][m.bytes].append(m.time_us)
            sources[m.collective, m.world_size].add(m.source)
    out = []
    for (collective, world), by_size in sorted(times.items()):
        sizes = sorted(by_size)
        out.append(
            MeasuredCurve(
                collective=collective,
                world_size=world,
                sizes=tuple(sizes),
                times_us=tuple(statistics.median(by_size[b]) for b in sizes),
                lows_us=tuple(min(by_size[b]) for b in sizes),
                highs_us=tuple(max(by_size[b]) for b in sizes),
                sources=tuple(sorted(sources[collective, world])),
            )
        )
    return tuple(out)


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
    basis: Basis = Basis.FITTED
    """What the time rests on: measured, interpolated, fitted, from all_reduce or a stated link."""
    algorithm: str = "ring"
    """The route the fitted form takes (``ring`` or ``tree``); for a measured time, the one it would."""

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
    measured: tuple[MeasuredCurve, ...] = ()
    """The measurements as curves per collective and world size: a prediction there is the measurement."""

    def collectives(self) -> list[str]:
        """The collectives the model has tiers of (others are timed from all_reduce's, :meth:`predict`)."""
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
        """The predicted time of one call, µs (world size 1: no communication, 0): the measurement
        where there is one, else the fitted form (:meth:`predict`)."""
        if world_size == 1:
            return 0.0
        fit, _ = self.fit_for(collective, world_size)
        got = self._measured(collective, nbytes, world_size)
        return fit.time_us(nbytes, world_size) if got is None else got[0]

    def _measured(self, collective: str, nbytes: float, world_size: int) -> tuple[float, float, float, Basis] | None:
        curve = next((c for c in self.measured if c.collective == collective and c.world_size == world_size), None)
        return curve.time_us(nbytes) if curve is not None else None

    def fit_for(self, collective: str, world_size: int) -> tuple[TierFit, Basis]:
        """The tier that times ``collective`` and its basis: all_gather's or reduce_scatter's without
        measurements of their own is all_reduce's (a ring all-reduce is both, in turn)."""
        halves = ("all_gather", "reduce_scatter")
        if collective in halves and collective not in self.collectives() and "all_reduce" in self.collectives():
            fit = self.tier("all_reduce", world_size)
            derived = dataclasses.replace(
                fit, collective=collective, origin=f"all_reduce's {fit.tier} tier ({fit.origin}), as a ring's half"
            )
            return derived, Basis.FROM_ALL_REDUCE
        fit = self.tier(collective, world_size)
        return fit, Basis.FITTED if fit.points else Basis.STATED

    def predict(
        self, collective: str, nbytes: int, world_size: int, *, measured_us: float | None = None
    ) -> CollectivePrediction:
        """The prediction of one call, with its 95% interval (and ``measured_us`` beside it): the
        measurement at this size and world size where the model holds one (its interval: the spread
        of the measurements there), interpolated between two sizes measured, else the fitted form."""
        fit, basis = self.fit_for(collective, world_size)
        time = fit.time_us(nbytes, world_size)
        lo, hi = fit.interval_us(nbytes, world_size)
        got = self._measured(collective, nbytes, world_size)
        if got is not None:
            time, lo, hi, basis = got
        return CollectivePrediction(
            collective=collective,
            bytes=int(nbytes),
            world_size=world_size,
            nodes=fit.nodes(world_size) if fit.net_step_us is not None else math.ceil(world_size / self.gpus_per_node),
            tier=fit.tier,
            time_us=time,
            lo_us=lo,
            hi_us=hi,
            measured_us=measured_us,
            basis=basis,
            algorithm=fit.route(nbytes, world_size).algorithm,
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
    tiers = [fit_tier(ms, collective=c, tier=t) for (c, t), ms in sorted(groups.items()) if t == INTRA]
    for (collective, tier), ms in sorted(groups.items()):
        if tier == INTER:
            intra = next((f for f in tiers if f.collective == collective), None)
            tiers.append(fit_tier(ms, collective=collective, tier=INTER, gpus_per_node=gpus_per_node, intra=intra))
    if link is not None:
        notes += _check_link(link, groups, gpus_per_node)
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
        measured=measured_curves(measurements),
    )


_CONTRADICTS = 2.0  # a stated bandwidth this many times what a log measured (either way) contradicts it


def _check_link(link: Link, groups: dict[tuple[str, str], list[Measurement]], gpus_per_node: int) -> list[str]:
    """A UsageError where the stated link contradicts an nccl-tests log of the same tier (a bandwidth
    more than 2× above or below the best bus bandwidth the log reached); else the notes that say the
    measurements, not the link, time that tier. A saved run's
    collectives are not checked against it (a CPU run's gloo says nothing of a GPU cluster's link):
    the note says they won."""
    stated = [
        ("intra", INTRA, link.intra_gbps, link.intra_gbps, "GB/s of bus bandwidth inside a node"),
        (
            "inter",
            INTER,
            link.inter_gbps,
            None if link.inter_gbps is None else gpus_per_node * link.inter_gbps,
            f"GB/s of bus bandwidth across nodes ({gpus_per_node} GPUs × its line rate)",
        ),
        ("inter-busbw", INTER, link.inter_busbw_gbps, link.inter_busbw_gbps, "GB/s of bus bandwidth across nodes"),
    ]

    def busbw_of(m: Measurement) -> float:
        return bus_factor(m.collective, m.world_size) * m.bytes / m.time_us / 1e3

    notes = []
    for key, tier, value, busbw, what in stated:
        measured = [m for (_, t), ms in groups.items() if t == tier for m in ms]
        if value is None or not measured:
            continue
        logs = [m for m in measured if not m.source.endswith(".json")]
        if logs:
            best = max(logs, key=busbw_of)
            reached = busbw_of(best)
            low = busbw * _CONTRADICTS < reached
            if busbw > _CONTRADICTS * reached or low:
                raise UsageError(
                    f"--link {key}={value:g}GB/s: {busbw:g} {what}, {'under half' if low else 'over twice'} the "
                    f"{reached:.4g} GB/s {best.source} measured ({best.collective}, {best.world_size} ranks, "
                    f"{best.bytes} B): expected a link the log agrees with, or the log alone"
                )
        best = max(measured, key=busbw_of)
        notes.append(
            f"--link {key}={value:g}GB/s: not used for the {tier} tier, which {best.source} measured "
            f"(at most {busbw_of(best):.4g} GB/s of bus bandwidth)"
        )
    return notes


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
