"""What the benchmark suites share: profiles, cases, and the step from trials to results.

The suites (``suites/``) are thin pytest modules over this. Their conftest measures every
selected case in interleaved fresh-process trials first (:class:`dpbench.measure.trials.TrialSession`);
each test then publishes its case's trials into pytest-benchmark and ``extra_info``
(schema 2). Nothing here imports pytest: a strategy that cannot run here raises
:class:`dpbench.strategies.StrategyUnavailable`, and the suites turn that into a skip with
its reason.
"""
from __future__ import annotations

import math
import os
import statistics
from dataclasses import asdict, dataclass
from typing import Any, Callable

from dpbench.measure.cases import CollectiveCase, TrainingCase, steps_for_round
from dpbench.schema import SCHEMA_VERSION, Profile
from dpbench.launcher.step_stats import StepStats, percentile
from dpbench.measure.trials import (CaseResult, TrialSession, advance_worker_clock, coefficient_of_variation,
                            log_t_interval, paired_ratios)

__all__ = [
    "CollectiveCase",
    "ProfileConfig",
    "TrainingCase",
    "collective_extra_info",
    "measure_collective",
    "measure_training",
    "merge_step_stats",
    "paired_ratio",
    "parse_trials",
    "publish",
    "reference_result",
    "relative_to",
    "resolve_profile",
    "steps_for_round",
    "strategy_cases",
    "training_extra_info",
    "trials_info",
]


@dataclass(kw_only=True, frozen=True)
class ProfileConfig:
    """How big a suite run is. ``quick``: CPU-sized, ≤ 5 minutes on 2 cores. ``full``: GPU runners."""

    name: Profile
    device: str
    world_sizes: tuple[int, ...]
    workloads: tuple[str, ...]
    scaling_workloads: tuple[str, ...]
    knob_workload: str
    global_batch: int
    per_replica_batch: int
    trials: int  # fresh-process trials per case, interleaved across the session
    rounds: int  # timed rounds per trial
    warmup_rounds: int  # untimed rounds per trial, after the probe
    target_round_s: float  # a round lasts about this long (k steps)
    max_steps_per_round: int
    sample_interval: float
    comm_sizes: tuple[int, ...]
    comm_iters: int
    bucket_cap_sweep: tuple[float, ...]

    @property
    def throughput_world_sizes(self) -> tuple[int, ...]:
        """World sizes of the throughput suite. Quick: the largest only — the scaling suite already
        measures 1…N, and a case measured twice costs trials that the gate needs."""
        return self.world_sizes if self.name is Profile.FULL else (max(self.world_sizes),)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["name"] = self.name.value
        out["throughput_world_sizes"] = list(self.throughput_world_sizes)
        return out


def _int_list(env: str, raw: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in raw.split(",") if v.strip())
    except ValueError:
        raise ValueError(f"{env} must be a comma-separated list of integers, got {raw!r}") from None
    if not values or any(v < 1 for v in values):
        raise ValueError(f"{env} must list integers >= 1, got {raw!r}")
    return values


def parse_trials(what: str, raw: Any) -> int:
    """A trial count: an integer >= 1, or a ValueError naming ``what``."""
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = 0
    if value < 1 or str(value) != str(raw).strip():
        raise ValueError(f"{what} must be an integer >= 1 (fresh-process trials per case), got {raw!r}")
    return value


def _str_list(raw: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in raw.split(",") if v.strip())


def resolve_profile(
    name: str | None = None,
    *,
    cuda_count: int,
    cpu_count: int | None = None,
    environ: dict[str, str] | None = None,
    cluster: Any = None,
) -> ProfileConfig:
    """Build the profile from ``DPBENCH_PROFILE`` (default: ``full`` with CUDA, else ``quick``).

    ``DPBENCH_DEVICE``, ``DPBENCH_WORLD_SIZES`` ("1,2,4") and ``DPBENCH_WORKLOADS`` ("mlp,lenet")
    override the profile's choices. ``cluster`` (a :class:`dpbench.launcher.cluster.ClusterInfo`; default:
    the active ``dpbench.launcher.cluster`` session's): world sizes are bounded by the torchrun world —
    see :func:`dpbench.launcher.cluster.cluster_world_sizes` — and a larger ``DPBENCH_WORLD_SIZES`` is an error.
    """
    from dpbench.measure.collectives import default_sizes

    env = os.environ if environ is None else environ
    cpu_count = cpu_count or os.cpu_count() or 1
    raw = name or env.get("DPBENCH_PROFILE") or (Profile.FULL.value if cuda_count else Profile.QUICK.value)
    try:
        profile = Profile(raw)
    except ValueError:
        raise ValueError(
            f"DPBENCH_PROFILE must be one of {[p.value for p in Profile]}, got {raw!r}"
        ) from None
    device = env.get("DPBENCH_DEVICE") or ("cuda" if cuda_count else "cpu")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"DPBENCH_DEVICE must be 'cpu' or 'cuda', got {device!r}")
    if device == "cuda" and not cuda_count:
        raise ValueError("DPBENCH_DEVICE=cuda but no CUDA device is visible")

    if profile is Profile.QUICK:
        # Up to the core count (capped at 4 so a big CPU box still finishes in minutes).
        max_world = cuda_count if device == "cuda" else min(cpu_count, 4)
        config = dict(
            workloads=("mlp", "lenet", "transformer"),
            scaling_workloads=("mlp",),
            knob_workload="mlp",
            global_batch=64,
            per_replica_batch=32,
            trials=5,
            rounds=2,
            warmup_rounds=1,
            target_round_s=0.2,
            max_steps_per_round=20,
            sample_interval=0.05,
            comm_sizes=tuple(default_sizes(max_bytes=16 << 20, factor=16)),
            comm_iters=5,
            bucket_cap_sweep=(1.0, 25.0),
        )
    else:
        max_world = cuda_count if device == "cuda" else cpu_count
        config = dict(
            workloads=("mlp", "lenet", "resnet18", "transformer", "dict_model"),
            scaling_workloads=("mlp", "resnet18", "transformer"),
            knob_workload="resnet18",
            global_batch=256,
            per_replica_batch=128,
            trials=5,
            rounds=5,
            warmup_rounds=2,
            target_round_s=0.5,
            max_steps_per_round=50,
            sample_interval=0.05,
            comm_sizes=tuple(default_sizes(max_bytes=256 << 20, factor=4)),
            comm_iters=20,
            bucket_cap_sweep=(1.0, 5.0, 25.0, 100.0),
        )
    world_sizes = tuple(range(1, max(max_world, 1) + 1))
    cluster = _cluster_info(cluster)  # dpbench.launcher.cluster
    if cluster is not None:
        from dpbench.launcher.cluster import cluster_world_sizes

        world_sizes = cluster_world_sizes(max(max_world, 1), cluster)
    if env.get("DPBENCH_TRIALS"):
        config["trials"] = parse_trials("DPBENCH_TRIALS", env["DPBENCH_TRIALS"])
    if env.get("DPBENCH_WORLD_SIZES"):
        world_sizes = _int_list("DPBENCH_WORLD_SIZES", env["DPBENCH_WORLD_SIZES"])
        if cluster is not None and max(world_sizes) > cluster.world_size:
            raise ValueError(
                f"DPBENCH_WORLD_SIZES={env['DPBENCH_WORLD_SIZES']!r} asks for {max(world_sizes)} ranks, but the "
                f"torchrun world has {cluster.world_size} (WORLD_SIZE: {cluster.nodes} node(s) × "
                f"{cluster.local_world_size} per node)")
    if env.get("DPBENCH_WORKLOADS"):
        from dpbench.workloads import check_workload_names

        config["workloads"] = check_workload_names("DPBENCH_WORKLOADS", _str_list(env["DPBENCH_WORKLOADS"]))
        config["scaling_workloads"] = config["workloads"][:1]
        config["knob_workload"] = config["workloads"][0]
    return ProfileConfig(name=profile, device=device, world_sizes=world_sizes, **config)


def _cluster_info(cluster: Any) -> Any:
    """``cluster`` itself, else the active dpbench.launcher.cluster session's info (None: one host)."""
    if cluster is not None:
        return cluster
    from dpbench.launcher.cluster import active_session

    session = active_session()
    return session.info if session is not None else None


def strategy_cases(workloads: tuple[str, ...], world_sizes: tuple[int, ...],
                   global_batch: Callable[[int], int]) -> list[TrainingCase]:
    """Every strategy × workload × world size (``single`` only at 1, the baseline), with
    ``global_batch(world_size)`` samples per step: fixed for strong scaling, growing for weak."""
    from dpbench.schema import StrategyName

    cases = []
    for workload in workloads:
        for strategy in StrategyName:
            sizes = (1,) if strategy is StrategyName.SINGLE else world_sizes
            cases += [TrainingCase(strategy=strategy.value, workload=workload, world_size=size,
                                   global_batch=global_batch(size)) for size in sizes]
    return cases


def merge_step_stats(rounds: list[StepStats]) -> StepStats:
    """All measured rounds as one record: every step time, mean phases, peak memory."""
    if not rounds:
        raise ValueError("no measured rounds")
    times = [t for r in rounds for t in r.step_times]
    phase_names = {name for r in rounds for name in r.phases}
    phases = {
        name: sum(r.phases.get(name, 0.0) * r.steps for r in rounds) / len(times) for name in sorted(phase_names)
    }
    peak: dict[str, int] = {}
    for r in rounds:
        for device, value in r.peak_memory_bytes.items():
            peak[device] = max(peak.get(device, 0), int(value))
    losses = [x for r in rounds for x in r.losses]
    return StepStats(step_times=times, global_batch=rounds[0].global_batch, losses=losses, phases=phases,
                     peak_memory_bytes=peak)


# ---------------------------------------------------------------- from trials to results
def _interval(values: list[float]) -> list[float] | None:
    ci = log_t_interval(values)
    return [ci[0], ci[1]] if ci else None


def trials_info(result: CaseResult) -> dict[str, Any]:
    """``extra_info["trials"]`` (schema 2): the trial structure behind the headline number."""
    trials = result.trials
    return {
        "count": len(trials),
        "rounds_per_trial": len(trials[0].round_times) if trials else 0,
        "order": [t.order for t in trials],
        "started_at": [t.started_at for t in trials],
        "step_time_s": result.values,
        "control_s": result.controls,
        "cv": coefficient_of_variation(result.values),
        "sampler": [t.sampler for t in trials],
        "timelines": [t.timeline for t in trials],
    }


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


def training_extra_info(*, case: TrainingCase, result: CaseResult, profile: ProfileConfig,
                        suite: str) -> dict[str, Any]:
    """The documented ``extra_info`` (schema 2) of one training benchmark."""
    first = result.trials[0]
    run_info = first.detail["run_info"]
    merged = merge_step_stats([t.detail["merged"] for t in result.trials])
    step_time = statistics.median(result.values)
    ci = _interval(result.values)
    batch = run_info["global_batch"]
    sampler = dict(first.sampler or {})
    info = {
        "schema": SCHEMA_VERSION,
        "kind": "training",
        "suite": suite,
        "profile": profile.name.value,
        "case_key": result.key,
        "strategy": run_info["strategy"],
        "options": dict(run_info.get("options") or {}),  # resolved: defaults included
        "requested_options": dict(case.options),  # what the case asked for: the short label
        "workload": run_info["workload"],
        "world_size": run_info["world_size"],
        # dpbench.launcher.cluster: how many nodes the ranks ran on, ranks on each (1, world_size on one host).
        "nodes": run_info.get("nodes", 1),
        "ranks_per_node": run_info.get("ranks_per_node", run_info["world_size"]),
        "device_type": run_info["device_type"],
        "backend": run_info.get("backend"),
        "global_batch": batch,
        "per_replica_batch": list(run_info["per_replica_batch"]),
        "steps_per_round": first.steps_per_round,
        "step_time_s": step_time,
        "step_time_ci95": ci,
        "samples_per_s": batch / step_time,
        "samples_per_s_ci95": [batch / ci[1], batch / ci[0]] if ci else None,
        "step_time_p50": statistics.median(merged.step_times),
        "step_time_p95": percentile(merged.step_times, 95),
        "phases": merged.phases,
        "peak_memory_bytes": merged.peak_memory_bytes,
        "sampler": sampler,
        "trials": trials_info(result),
        "threads_per_worker": run_info.get("threads_per_worker"),
        "workers": run_info.get("workers"),
        "affinity": run_info.get("affinity"),
        "seed": run_info["seed"],
        "lr": run_info.get("lr"),
        "final_loss": first.detail["merged"].losses[-1] if first.detail["merged"].losses else None,
    }
    if run_info.get("workload_params"):
        info["workload_params"] = run_info["workload_params"]
    if result.case_metrics:
        info.update(result.case_metrics)
        try:
            from dpbench.strategies._metrics import derive
        except ImportError:  # metrics arrive with the sharding strategies
            derive = None
        if derive is not None:
            info.update(derive(result.case_metrics, step_time_s=step_time, world_size=info["world_size"]))
    return info


def collective_extra_info(*, case: CollectiveCase, result: CaseResult, profile: ProfileConfig) -> dict[str, Any]:
    """The documented ``extra_info`` (schema 2) of one collective benchmark."""
    from dpbench.measure.collectives import bus_bandwidth_factor

    first = result.trials[0]
    pool = first.detail["pool_info"]
    time_s = statistics.median(result.values)
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
        "world_size": pool["world_size"],
        "nodes": pool.get("nodes", 1),  # dpbench.launcher.cluster
        "ranks_per_node": pool.get("ranks_per_node", pool["world_size"]),
        "device_type": profile.device,
        "backend": pool.get("backend"),
        "threads_per_worker": pool.get("threads_per_worker"),
        "seed": None,
        "iters_per_round": first.steps_per_round,
        "time_s": time_s,
        "time_ci95": _interval(result.values),
        "algbw_gbps": algbw,
        "busbw_gbps": algbw * bus_bandwidth_factor(case.collective, pool["world_size"]),
        "sampler": dict(first.sampler or {}),
        "trials": trials_info(result),
    }


def publish(benchmark: Any, result: CaseResult) -> None:
    """Hand every timed round of every trial to pytest-benchmark, as seconds per step.

    The suites' tests read time through :func:`dpbench.measure.trials.worker_clock`, which only moves
    when told: replaying a round advances it by the round's worker-measured time per step.
    """
    values = [v for t in result.trials for v in t.round_times]
    pending = iter(values)
    benchmark.pedantic(lambda: advance_worker_clock(next(pending)), rounds=len(values), iterations=1,
                       warmup_rounds=0)
    stats = getattr(getattr(benchmark, "stats", None), "stats", None)
    if stats is not None and not math.isclose(stats.median, statistics.median(values), rel_tol=1e-9):
        raise RuntimeError(
            "pytest-benchmark did not read the worker clock: the test needs "
            "@pytest.mark.benchmark(timer=dpbench.measure.trials.worker_clock) (suites/conftest.py adds it)")


def measure_training(benchmark: Any, case: TrainingCase, *, session: TrialSession, profile: ProfileConfig,
                     suite: str) -> tuple[dict[str, Any], CaseResult]:
    """Publish ``case``'s trials (measured earlier by ``session``) into ``benchmark``.

    Raises StrategyUnavailable when the case cannot run here and the trial's own error when
    one of its trials failed. Returns the extra_info (also on ``benchmark.extra_info``).
    """
    result = _available(session.result(case.key))
    info = training_extra_info(case=case, result=result, profile=profile, suite=suite)
    publish(benchmark, result)
    benchmark.extra_info.update(info)
    return info, result


def measure_collective(benchmark: Any, case: CollectiveCase, *, session: TrialSession,
                       profile: ProfileConfig) -> dict[str, Any]:
    result = _available(session.result(case.key))
    info = collective_extra_info(case=case, result=result, profile=profile)
    publish(benchmark, result)
    benchmark.extra_info.update(info)
    return info


def paired_ratio(numerator: CaseResult, denominator: CaseResult) -> tuple[float, list[float] | None, list[float]]:
    """Median and 95% interval of trial-by-trial ratios of two cases' step times."""
    ratios = paired_ratios(numerator.values, denominator.values)
    if not ratios:
        raise ValueError("no trials to pair")
    return statistics.median(ratios), _interval(ratios), ratios


def relative_to(name: str, result: CaseResult, reference: CaseResult) -> dict[str, Any]:
    """``{name, name_ci95, name_trials}``: step time ÷ the reference's, trial i against trial i."""
    ratio, ci, ratios = paired_ratio(result, reference)
    return {name: ratio, f"{name}_ci95": ci, f"{name}_trials": ratios}


def reference_result(session: TrialSession, case: TrainingCase) -> CaseResult | None:
    """The measured trials of ``case.reference`` when it ran (None when it could not)."""
    if case.reference is None:
        return None
    ref = session.result(case.reference.key)
    return ref if ref.trials and ref.error is None else None
