"""From measured trials to results: the documented ``extra_info`` (schema 2) of each benchmark,
published into pytest-benchmark.

The suites (``suites/``) are thin pytest modules over this. The measuring plugin measures every
selected case in interleaved fresh-process trials first (:class:`dpbench.measure.trials.TrialSession`);
each test then publishes its case's trials into pytest-benchmark and ``extra_info``
(schema 2). Nothing here imports pytest: a strategy that cannot run here raises
:class:`dpbench.strategies.StrategyUnavailable`, and the suites turn that into a skip with
its reason.
"""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING, Any

from dpbench.launcher.step_stats import merge_step_stats
from dpbench.measure.cases import CollectiveCase, CollectiveDetail, TrainingCase, TrainingDetail
from dpbench.measure.energy import energy_info, window_info
from dpbench.measure.profiles import ProfileConfig
from dpbench.measure.trials import CaseResult, TrialResult, TrialSession, advance_worker_clock, reset_worker_clock
from dpbench.schema import SCHEMA_VERSION
from dpbench.stats import coefficient_of_variation, log_t_interval, or_none, paired_ratio, percentile

if TYPE_CHECKING:
    from dpbench.launcher.run_info import RunInfo

__all__ = [
    "collective_extra_info",
    "harness_settings",
    "measure_collective",
    "measure_training",
    "publish",
    "reference_result",
    "relative_to",
    "training_extra_info",
    "trials_info",
]


# ---------------------------------------------------------------- from trials to results
def _interval(values: list[float]) -> list[float] | None:
    lo, hi = log_t_interval(values)
    return None if math.isnan(lo) else [lo, hi]


def trials_info(result: CaseResult) -> dict[str, Any]:
    """``extra_info["trials"]`` (schema 2): the trial structure behind the headline number."""
    trials = result.trials
    return {
        "count": len(trials),
        "rounds_per_trial": len(trials[0].round_times) if trials else 0,
        "order": [t.order for t in trials],
        "started_at": [t.started_at for t in trials],
        # Every slot's trial, a disturbed one included; "disturbed" says which, and which of them
        # every estimate leaves out (dpbench.measure.remeasure, docs/disturbed-trials.md).
        "step_time_s": result.measured_values,
        # Every timed round of every trial (seconds per step or call), for distributions: the
        # headline and pytest-benchmark's statistics are over the trials, never over rounds.
        "round_times_s": [list(t.round_times) for t in trials],
        "control_s": result.controls,
        # Training cases: minor page faults per step of each trial (StepStats.minor_faults; None for
        # collectives): a trial slower than its siblings with many more of them lost to the allocator.
        "minor_faults_per_step": [_faults_per_step(t) for t in trials],
        "cv": or_none(coefficient_of_variation(result.kept)),
        "sampler": [t.sampler for t in trials],
        "timelines": [t.timeline for t in trials],
        "disturbed": _disturbed(result),
    }


def _disturbed(result: CaseResult) -> list[dict[str, Any] | None]:
    """Per slot: None, or why its trial was disturbed, whether a re-measurement replaced it (the
    disturbed trial's numbers then under ``measured``) and whether the estimates leave it out."""
    flags = (list(result.disturbed) + [None] * len(result.trials))[: len(result.trials)]
    return [None if f is None else {**f, "left_out": out} for f, out in zip(flags, result.left_out)]


def _median_phases(trials: list[Any]) -> dict[str, float]:
    """Per phase, the median over trials of each trial's mean seconds per step: one disturbed trial
    moves it by one rank at most (a mean over all steps carried it whole)."""
    per_trial = [_training_detail(t).step_stats.phases for t in trials]
    names = sorted({name for phases in per_trial for name in phases})
    return {name: statistics.median(p[name] for p in per_trial if name in p) for name in names}


def _kept_trials(result: CaseResult) -> list[Any]:
    return [t for t, out in zip(result.trials, result.left_out) if not out]


def _training_detail(trial: TrialResult) -> TrainingDetail:
    if not isinstance(trial.detail, TrainingDetail):
        raise TypeError(f"trial.detail: expected a TrainingDetail, found {type(trial.detail).__name__}")
    return trial.detail


def _collective_detail(trial: TrialResult) -> CollectiveDetail:
    if not isinstance(trial.detail, CollectiveDetail):
        raise TypeError(f"trial.detail: expected a CollectiveDetail, found {type(trial.detail).__name__}")
    return trial.detail


def _faults_per_step(trial: TrialResult) -> float | None:
    """Minor page faults per step of a launched case's trial; None for a collective's."""
    if not isinstance(trial.detail, TrainingDetail):
        return None
    return or_none(trial.detail.step_stats.minor_faults_per_step)


def _available(result: CaseResult) -> CaseResult:
    """The result of a case that ran; otherwise raise what stopped it (skip reason or the error)."""
    from dpbench.strategies.base import StrategyUnavailable

    if result.skip_reason is not None:
        raise StrategyUnavailable(result.skip_reason)
    if result.error is not None:
        raise result.error
    if not result.trials:
        raise RuntimeError(f"case {result.key} was not measured in this session")
    return result


def workload_sizes(workload: Any, profile: ProfileConfig) -> tuple[int | None, int | None]:
    """(parameters, buffer bytes) of the case's model (resolved once per session by ``profile``),
    built once on the meta device; (None, None) where its factory cannot, or where the case names
    no workload spec (a recipe)."""
    from dpbench.workloads import meta_sizes

    try:
        return meta_sizes(profile.workload(workload))
    except Exception:  # a model that cannot be built on the meta device: the sizes are left out, not the case
        return None, None


def training_extra_info(
    *,
    case: TrainingCase,
    result: CaseResult,
    profile: ProfileConfig,
    suite: str,
    idle_power: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The documented ``extra_info`` (schema 2) of one training benchmark; ``idle_power``: the
    session's idle baseline (:func:`dpbench.measure.energy.idle_power`; None where it measured none)."""
    first = result.trials[0]
    detail = _training_detail(first)
    run_info = detail.run_info
    kept = _kept_trials(result)
    merged = merge_step_stats([_training_detail(t).step_stats for t in kept])
    step_time = statistics.median(result.kept)
    ci = _interval(result.kept)
    batch = run_info.global_batch
    sampler = dict(first.sampler or {})
    trials_faults = [f for f in (_faults_per_step(t) for t in kept) if f is not None]
    info = {
        "schema": SCHEMA_VERSION,
        "kind": "training",
        "suite": suite,
        "profile": profile.name.value,
        "case_key": result.key,
        "strategy": run_info.strategy,
        "options": dict(run_info.options),  # resolved: defaults included
        "requested_options": dict(case.options),  # what the case asked for: the short label
        "workload": run_info.workload,
        "world_size": run_info.world_size,
        # dpbench.cluster: how many nodes the ranks ran on, ranks on each (1, world_size on one host).
        "nodes": run_info.nodes,
        "ranks_per_node": run_info.ranks_per_node,
        "device_type": run_info.device_type,
        "backend": run_info.backend,
        "global_batch": batch,
        "per_replica_batch": list(run_info.per_replica_batch),
        "steps_per_round": first.steps_per_round,
        "step_time_s": step_time,
        "step_time_ci95": ci,
        "samples_per_s": batch / step_time,
        "samples_per_s_ci95": [batch / ci[1], batch / ci[0]] if ci else None,
        # A tail, not a centre: the 95th percentile of every step of every trial kept. The centre is
        # step_time_s alone (one estimator: no pooled-step median).
        "step_time_p95": percentile(merged.step_times, 95),
        "phases": _median_phases(kept),
        "peak_memory_bytes": merged.peak_memory_bytes,
        # Median over trials of each trial's minor page faults per step (every rank summed).
        "minor_faults_per_step": or_none(statistics.median(trials_faults)) if trials_faults else None,
        "sampler": sampler,
        "trials": trials_info(result),
        # GPU energy over each trial's timed window, per sample and per second, beside the idle draw;
        # absent with why where no counter was read (dpbench.measure.energy).
        "energy": energy_info(
            [_training_detail(t).energy for t in result.trials], left_out=result.left_out, idle=idle_power
        ),
        # How long each trial's GPUs were sampled, and whether NVML's readings needed longer (None on CPU).
        "sampled_window": window_info([t.sampler for t in result.trials]),
        "threads_per_worker": run_info.threads_per_worker,
        "harness_settings": harness_settings(run_info, worker_start=result.worker_start),
        "workers": run_info.workers,
        "affinity": run_info.affinity,
        "seed": run_info.seed,
        "lr": run_info.lr,
        "final_loss": detail.step_stats.losses[-1] if detail.step_stats.losses else None,
    }
    if run_info.workload_params:
        info["workload_params"] = run_info.workload_params
    # The spec the workload was named by, resolved (registered name, module:attr, hf:, overrides).
    info["workload_spec"] = run_info.workload_params.get("spec", run_info.workload)
    # buffer_bytes: what DDP's broadcast_buffers sends before a step's first forward (0: no buffers).
    info["parameter_count"], info["buffer_bytes"] = workload_sizes(case.workload, profile)
    metrics = dict(result.case_metrics or {})
    # Recorded with the case metrics (first trial), by every training and convergence case; nothing derives from it.
    fingerprint = metrics.pop("fingerprint", None)
    if metrics:
        info.update(metrics)
        from dpbench.measure.derive import derive

        info.update(derive(metrics, step_time_s=step_time, world_size=info["world_size"]))
    if fingerprint is not None:
        info["fingerprint"] = fingerprint
    if detail.trace is not None:  # opt-in tracing (dpbench.measure.tracing)
        from dpbench.measure.tracing import trace_extra_info

        info["trace_breakdown"] = trace_extra_info(detail.trace, info)
    return info


def collective_extra_info(*, case: CollectiveCase, result: CaseResult, profile: ProfileConfig) -> dict[str, Any]:
    """The documented ``extra_info`` (schema 2) of one collective benchmark."""
    from dpbench.measure.collectives import bus_bandwidth_factor

    first = result.trials[0]
    pool = _collective_detail(first)
    time_s = statistics.median(result.kept)
    algbw = case.size_bytes / time_s / 1e9
    return {
        "schema": SCHEMA_VERSION,
        "kind": "collective",
        "suite": "comm",
        "profile": profile.name.value,
        "case_key": result.key,
        "collective": case.collective,
        "size_bytes": case.size_bytes,
        "size_source": case.source,
        "dtype": "float32",
        "world_size": pool.world_size,
        "nodes": pool.nodes,  # dpbench.cluster
        "ranks_per_node": pool.ranks_per_node,
        "device_type": profile.device,
        "backend": pool.backend,
        "threads_per_worker": pool.threads_per_worker,
        "seed": None,
        "iters_per_round": first.steps_per_round,
        "time_s": time_s,
        "time_ci95": _interval(result.kept),
        "algbw_gbps": algbw,
        "busbw_gbps": algbw * bus_bandwidth_factor(case.collective, pool.world_size),
        "sampler": dict(first.sampler or {}),
        "trials": trials_info(result),
    }


def harness_settings(run_info: RunInfo, *, worker_start: str | None = None) -> dict[str, Any]:
    """What dpbench itself set for this case's workers, beside what the user's environment had.

    Everything else is the user's: the OpenMP/MKL variables are inherited unchanged
    (``workers/runtime_env.py``); ``user_runtime_env`` is what rank 0's runtime was started with."""
    workers = run_info.workers
    affinity = run_info.affinity or {}
    threads = run_info.threads_per_worker
    first = workers[0] if workers and isinstance(workers[0], dict) else {}
    return {
        "torch_threads": threads,  # torch.set_num_threads in every worker (OMP/MKL_NUM_THREADS for its children)
        "interop_threads": first.get("interop_threads"),  # torch.set_num_interop_threads(1)
        "pinned": affinity.get("pinned"),
        "rank_cores": affinity.get("rank_cores"),  # sched_setaffinity per rank (None: not pinned)
        "parent_cores": affinity.get("parent_cores"),  # where the parent and sampler were moved
        "added_runtime_env": {},  # nothing: no OMP_WAIT_POLICY or other default of dpbench's
        "user_runtime_env": dict(first.get("runtime_env") or {}),
        # How the workers were started: dpbench.workers.forkserver.worker_start (None: not said, e.g. launch() alone).
        "worker_start": worker_start,
    }


def publish(benchmark: Any, result: CaseResult) -> None:
    """Hand every trial kept to pytest-benchmark as one round: its median step time (seconds per
    step); a disturbed trial left out (dpbench.measure.remeasure) is no round.

    So pytest-benchmark's statistics (its terminal table, ``pytest-benchmark compare``) are over
    the trials, the unit of repetition, and its median *is* ``step_time_s`` bit for bit: the
    suites' tests read time through :func:`dpbench.measure.trials.worker_clock`, reset to 0 before
    each round (pytest-benchmark's ``setup``, outside its timer) and advanced by the trial's value.
    The rounds themselves are in ``extra_info["trials"]["round_times_s"]``.
    """
    values = list(result.kept)  # a disturbed trial left out is no round: the median stays the headline
    pending = iter(values)
    benchmark.pedantic(
        lambda: advance_worker_clock(next(pending)),
        setup=reset_worker_clock,
        rounds=len(values),
        iterations=1,
        warmup_rounds=0,
    )
    stats = getattr(getattr(benchmark, "stats", None), "stats", None)
    if stats is not None and stats.median != statistics.median(values):
        raise RuntimeError(
            "pytest-benchmark did not read the worker clock: the test needs "
            "@pytest.mark.benchmark(timer=dpbench.measure.trials.worker_clock) (the measuring plugin adds it)"
        )


def measure_training(
    benchmark: Any, case: TrainingCase, *, session: TrialSession, profile: ProfileConfig, suite: str
) -> tuple[dict[str, Any], CaseResult]:
    """Publish ``case``'s trials (measured earlier by ``session``) into ``benchmark``.

    Raises StrategyUnavailable when the case cannot run here and the trial's own error when
    one of its trials failed. Returns the extra_info (also on ``benchmark.extra_info``).
    """
    result = _available(session.result(case.key))
    info = training_extra_info(case=case, result=result, profile=profile, suite=suite, idle_power=session.idle_power)
    if session.claim_looks is not None:  # trials until settled: the looks its level is split over
        info["claim_looks"] = session.claim_looks
    publish(benchmark, result)
    benchmark.extra_info.update(info)
    return info, result


def measure_collective(
    benchmark: Any, case: CollectiveCase, *, session: TrialSession, profile: ProfileConfig
) -> dict[str, Any]:
    result = _available(session.result(case.key))
    info = collective_extra_info(case=case, result=result, profile=profile)
    publish(benchmark, result)
    benchmark.extra_info.update(info)
    return info


def relative_to(name: str, result: CaseResult, reference: CaseResult) -> dict[str, Any]:
    """``{name, name_ci95, name_trials}``: step time ÷ the reference's, trial i against trial i
    (:func:`dpbench.stats.paired_ratio`: the median of the pairs and its 95% interval, as the field's
    name says; a disturbed trial left out drops its pair). Claims ask their question's level instead."""
    ratio = paired_ratio(result.values, reference.values)
    if not ratio.pairs:
        raise ValueError("no trials to pair")
    return {name: ratio.ratio, f"{name}_ci95": ratio.interval, f"{name}_trials": list(ratio.ratios)}


def reference_result(session: TrialSession, case: TrainingCase) -> CaseResult | None:
    """The measured trials of ``case.reference`` when it ran (None when it could not)."""
    if case.reference is None:
        return None
    ref = session.result(case.reference.key)
    return ref if ref.trials and ref.error is None else None
