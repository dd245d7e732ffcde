"""A saved run → every strategy's predicted step at the world sizes asked for, and which strategy
to pick at each: :func:`step_predictions`, what ``dpbench predict RUN`` prints and what a report
section can render (it returns a typed :class:`StepForecast`; it computes nothing a renderer must
redo).

The overlap slowdown is measured from the run where it can be: each case at two ranks or more of
a strategy whose schedule calibrates it (``StepSchedule.calibrates_overlap``: ddp's) records its
step, its compute-only step and its collectives replayed alone; the slowdown is the value (in
[0, 1]) at which that schedule, with those collectives, gives the measured step (the median over
such cases). Otherwise it is stated (:func:`~dpbench.predict.step.stated_overlap`).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dpbench.errors import UsageError
from dpbench.predict.basis import basis_notes, busy_line, check_model, run_collective_model
from dpbench.predict.collectives import CollectiveModel
from dpbench.predict.profile import StepProfile, case_label, gpu_sharing, profile_from_benchmark, profiles_from_run
from dpbench.predict.schedule import replay
from dpbench.predict.step import (
    OverlapSlowdown,
    StepPrediction,
    predict_step,
    stated_overlap,
    step_tasks,
    with_derived_collectives,
)
from dpbench.strategies import step_schedule

__all__ = [
    "StepForecast",
    "StrategyPick",
    "measure_overlap",
    "missed",
    "pick_strategies",
    "select_profiles",
    "run_collective_model",  # from dpbench.predict.basis, where the forecast's sources are read
    "step_predictions",
]

# (profile, world size, global batch) → the estimator's peak bytes per rank, or None
Memory = Callable[[StepProfile, int, int], "int | None"]


@dataclass(kw_only=True, frozen=True)
class StrategyPick:
    """Which strategy configuration one workload would use at one world size, and how sure — or
    why none is picked."""

    workload: str
    """The workload spec."""
    world_size: int
    """Ranks."""
    label: str | None
    """The fastest predicted strategy configuration; None: no pick (``why`` says why)."""
    sure: bool
    """Whether its interval lies below every other's (no overlap)."""
    overlapping: tuple[str, ...]
    """The configurations whose intervals overlap the pick's (empty when sure)."""
    why: str = ""
    """Why there is no pick: where the model missed a measurement by more than its own interval."""

    def sentence(self) -> str:
        """``w8 mlp: ddp (sure)``, ``w8 mlp: ddp (not sure: overlaps zero)`` or ``w8 mlp: no pick: …``."""
        if self.label is None:
            return f"w{self.world_size} {self.workload}: no pick: {self.why}"
        how = "sure" if self.sure else f"not sure: overlaps {', '.join(self.overlapping)}"
        return f"w{self.world_size} {self.workload}: {self.label} ({how})"


@dataclass(kw_only=True, frozen=True)
class StepForecast:
    """Every prediction of one run, the picks and what they rest on."""

    source: str
    """The run's id."""
    scaling: str
    """``weak`` (per-rank batch fixed) or ``strong`` (global batch fixed)."""
    overlap: OverlapSlowdown
    """The overlap slowdown used."""
    profiles: tuple[StepProfile, ...]
    """The profiles predicted from."""
    predictions: tuple[StepPrediction, ...]
    """Per workload × strategy configuration × world size."""
    picks: tuple[StrategyPick, ...]
    """Per workload × world size."""
    notes: tuple[str, ...] = ()
    """What the predictions leave out or assume, one line each."""
    memory: str = "not estimated"
    """What ``memory_per_rank_bytes`` counts, in words (from the caller's estimator)."""


def _calibrating_cases(run: Any, *, shared: bool = False) -> list[dict[str, Any]]:
    """The run's multi-rank cases whose schedule calibrates the overlap slowdown, with what the fit reads:
    those whose ranks had a GPU each (or ran on CPU); ``shared``: those whose ranks shared a GPU instead
    (time-sliced, they measure the sharing, not the overlap)."""
    out = []
    for bench in run.benchmarks:
        info = bench.get("extra_info") or {}
        schedule = step_schedule(str(info.get("strategy")), info.get("options") or {})
        if (
            info.get("kind") == "training"
            and schedule is not None
            and schedule.calibrates_overlap
            and int(info.get("world_size") or 1) > 1
            and all(isinstance(info.get(k), (int, float)) for k in ("compute_only_step_s", "collective_time_s"))
            and ((gpu_sharing(info) or 1) > 1) == shared
        ):
            out.append(info)
    return out


def _fit_slowdown(profile: StepProfile, collective_s: float, measured_s: float) -> float:
    """The slowdown at which the profile's schedule, its collectives (the buckets' all-reduces, the
    buffers' broadcast) sharing ``collective_s`` by bytes, gives ``measured_s``."""

    def send(collective: str, nbytes: float, group: int, spans: bool) -> float:
        return nbytes

    compute, by_bytes, _ = step_tasks(
        profile, world_size=profile.world_size, batch_scale=1.0, send=send, gpus_per_node=profile.world_size
    )
    total = sum(t.seconds for t in by_bytes) or 1.0
    comm = [dataclasses.replace(t, seconds=collective_s * t.seconds / total) for t in by_bytes]

    def step(slowdown: float) -> float:
        return replay(compute, comm, overlap_slowdown=slowdown).end_s

    lo, hi = 0.0, 1.0
    if measured_s <= step(lo):
        return lo
    if measured_s >= step(hi):
        return hi
    for _ in range(40):  # the step grows with the slowdown: bisect
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if step(mid) < measured_s else (lo, mid)
    return (lo + hi) / 2


def measure_overlap(run: Any) -> OverlapSlowdown | None:
    """The overlap slowdown the run's multi-rank ddp cases measure (their median), or None."""
    fitted = []
    for info in _calibrating_cases(run):
        try:
            profile = profile_from_benchmark(info, origin=run.run_id)
        except UsageError:  # a case without the phases measures no slowdown; the others still do
            continue
        fitted.append((_fit_slowdown(profile, float(info["collective_time_s"]), profile.step_time_s), profile))
    if not fitted:
        return None
    values = [v for v, _ in fitted]
    value = statistics.median(values)
    return OverlapSlowdown(
        value=value,
        origin=f"measured: the median over the run's {len(values)} ddp case(s) at 2+ ranks "
        f"(from {min(values):.2f} to {max(values):.2f}), each fitted to its step, compute-only step and collectives",
    )


def missed(p: StepPrediction) -> bool:
    """Whether ``p``'s measurement lies outside its interval (the model did not hold there)."""
    m = p.measured_step_time_s
    return p.error is not None and m is not None and not p.lo_s <= m <= p.hi_s


def pick_strategies(predictions: list[StepPrediction]) -> list[StrategyPick]:
    """Per workload and world size, the fastest predicted configuration; sure when no other interval
    overlaps it. None where the model missed one of the workload's measurements by more than its own
    interval (at any world size it can check): a pick the table contradicts is no pick."""
    groups: dict[tuple[str, int], list[StepPrediction]] = {}
    for p in predictions:
        groups.setdefault((p.workload, p.world_size), []).append(p)
    misses: dict[str, list[StepPrediction]] = {}
    for p in predictions:
        if missed(p):
            misses.setdefault(p.workload, []).append(p)
    out = []
    for (workload, world), group in sorted(groups.items()):
        if workload in misses:
            why = "; ".join(
                f"{p.label} at w{p.world_size} predicted {p.error:+.1%} off its measurement, outside its interval"
                for p in misses[workload]
            )
            out.append(
                StrategyPick(
                    workload=workload,
                    world_size=world,
                    label=None,
                    sure=False,
                    overlapping=(),
                    why=f"the model did not hold where it can be checked ({why})",
                )
            )
            continue
        best = min(group, key=lambda p: p.step_time_s)
        overlapping = tuple(p.label for p in group if p is not best and p.lo_s <= best.hi_s)
        out.append(
            StrategyPick(
                workload=workload, world_size=world, label=best.label, sure=not overlapping, overlapping=overlapping
            )
        )
    return out


def _measured(run: Any) -> dict[tuple[str, str, int, int], tuple[float, int | None]]:
    """(workload, label, world size, global batch) → the run's step there and the most ranks that shared one GPU."""
    out: dict[tuple[str, str, int, int], tuple[float, int | None]] = {}
    for bench in run.benchmarks:
        info = bench.get("extra_info") or {}
        if info.get("kind") != "training" or not isinstance(info.get("step_time_s"), (int, float)):
            continue
        key = (
            str(info.get("workload_spec") or info.get("workload")),
            case_label(str(info.get("strategy")), info.get("requested_options") or {}),
            int(info.get("world_size") or 1),
            int(info.get("global_batch") or 0),
        )
        out.setdefault(key, (float(info["step_time_s"]), gpu_sharing(info)))
    return out


def _sharing_notes(profiles: list[StepProfile], predictions: list[StepPrediction]) -> list[str]:
    """What ranks sharing a GPU did to the profiles and to the measurements beside the predictions."""
    notes = []
    for p in profiles:
        if (p.ranks_per_device or 1) > 1:
            notes.append(
                f"{p.label} on {p.workload} is predicted from w{p.world_size}, whose ranks shared a GPU "
                f"({p.ranks_per_device} on one, time-sliced: no MPS): its compute is not a GPU's per rank, "
                "and the predictions from it are as slow"
            )
    shared = sorted(
        {(p.world_size, p.measured_ranks_per_device or 1) for p in predictions if p.measured_on_shared_device}
    )
    for world, ranks in shared:
        labels = sorted({p.label for p in predictions if p.world_size == world and p.measured_on_shared_device})
        notes.append(
            f"measured at w{world} with {ranks} ranks on one GPU ({', '.join(labels)}): time-sliced (no MPS), not "
            "a GPU per rank as predicted: shown beside the prediction, no error given (no check of the model)"
        )
    return notes


def select_profiles(profiles: list[StepProfile], strategies: Sequence[str] | None) -> list[StepProfile]:
    """The profiles whose strategy or label ``strategies`` names (None: all); a name matching none is
    a UsageError listing the labels."""
    if not strategies:
        return profiles
    labels = sorted({p.label for p in profiles} | {p.strategy for p in profiles})
    for name in strategies:
        if name not in labels:
            from dpbench.errors import expected_names_from

            raise UsageError(expected_names_from("--strategies", name, labels, what="configurations in the run"))
    return [p for p in profiles if p.label in strategies or p.strategy in strategies]


def step_predictions(
    run: Any,
    model: CollectiveModel,
    world_sizes: list[int],
    *,
    scaling: str = "weak",
    overlap: OverlapSlowdown | None = None,
    from_world_size: int | None = None,
    memory: Memory | None = None,
    memory_kind: str = "not estimated",
    threads_per_rank: int | None = None,
    strategies: Sequence[str] | None = None,
    accumulation: str = "count",
) -> StepForecast:
    """Every ddp, fsdp, zero and allreduce configuration of ``run`` (a ``dpbench.results.SavedRun``)
    predicted at ``world_sizes`` from its smallest world size measured (or ``from_world_size``),
    with the run's own measurement beside where it has one; ``overlap``: the slowdown to use
    (default: measured from the run, else stated); ``memory``: the estimator's bytes per rank
    (None where it cannot), ``memory_kind`` what they count, in words; ``threads_per_rank``: the CPU
    threads each rank will have (default: as measured; see :func:`~dpbench.predict.step.predict_step`);
    ``strategies``: the configurations to predict (labels or strategies; default: all); ``accumulation``:
    under strong scaling, keep the measured micro-batches (``count``) or micro-batch size (``micro-batch``)."""
    if not world_sizes or any(n < 1 for n in world_sizes):
        raise UsageError(f"--world-sizes: expected positive integers, found {world_sizes}")
    profiles = select_profiles(profiles_from_run(run, world_size=from_world_size), strategies)
    model = with_derived_collectives(model)
    check_model(profiles, model, world_sizes)
    given = overlap is not None
    if overlap is None:
        overlap = measure_overlap(run) or stated_overlap(profiles[0].device_type)
    measured = _measured(run)
    predictions = []
    for p in profiles:
        for n in world_sizes:
            batch = p.per_rank_batch * n if scaling == "weak" else p.per_rank_batch * p.world_size
            peak = memory(p, n, batch) if memory is not None else None
            # the run's case at this world size and global batch: weak or strong, like with like
            found, sharing = measured.get((p.workload, p.label, n, batch)) or (None, None)
            predictions.append(
                predict_step(
                    p,
                    model,
                    n,
                    overlap=overlap,
                    scaling=scaling,
                    memory_per_rank_bytes=peak,
                    measured_step_time_s=found,
                    measured_ranks_per_device=sharing,
                    threads_per_rank=threads_per_rank,
                    accumulation=accumulation,
                )
            )
    notes = list(model.notes) + basis_notes(profiles, model) + _sharing_notes(profiles, predictions)
    busy = busy_line(run)
    if busy:
        notes.insert(0, f"the source run {run.run_id} was flagged: {busy}")
    left_out = [] if given else _calibrating_cases(run, shared=True)
    if left_out:
        notes.append(
            f"overlap slowdown not measured from the {len(left_out)} ddp case(s) whose ranks shared a GPU "
            "(time-sliced: they measure the sharing)"
        )
    if threads_per_rank is not None:
        measured_threads = sorted({p.threads_per_rank for p in profiles if p.threads_per_rank})
        notes.append(
            f"compute scaled from {', '.join(map(str, measured_threads)) or 'unrecorded'} thread(s) per rank as "
            f"measured to {threads_per_rank}, linearly"
        )
    for note in dict.fromkeys(note for p in profiles for note in p.schedule.notes):
        notes.append(note)
    missing = sorted({p.workload for p in predictions if memory is not None and p.memory_per_rank_bytes is None})
    if missing:
        notes.append(f"memory not estimated for {', '.join(missing)}: the estimator cannot build the workload here")
    unrecorded = sorted({p.label for p in profiles if p.broadcasts_buffers and p.buffer_bytes is None})
    if unrecorded:
        notes.append(
            f"buffer broadcasts not modelled for {', '.join(unrecorded)}: the run does not record the buffers' "
            "bytes (extra_info.buffer_bytes)"
        )
    notes.append(
        "gradient buckets and FSDP units are cut from the parameter bytes (a run records no per-parameter sizes)"
    )
    return StepForecast(
        source=run.run_id,
        scaling=scaling,
        overlap=overlap,
        profiles=tuple(profiles),
        predictions=tuple(predictions),
        picks=tuple(pick_strategies(predictions)),
        notes=tuple(notes),
        memory=memory_kind if memory is not None else "not estimated",
    )
