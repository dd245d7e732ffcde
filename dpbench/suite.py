"""What the benchmark suites share: profiles, the measured training case, extra_info.

The suites (``suites/``) are thin pytest modules over this. Nothing here imports pytest:
a strategy that cannot run here raises :class:`dpbench.strategies.StrategyUnavailable`,
and the suites turn that into a skip with its reason.
"""
from __future__ import annotations

import math
import os
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from dpbench.schema import SCHEMA_VERSION, Profile
from dpbench.stats import StepStats, percentile

__all__ = [
    "ProfileConfig",
    "TrainingCase",
    "resolve_profile",
    "measure_training",
    "training_extra_info",
    "merge_step_stats",
    "steps_for_round",
    "strategy_cases",
]

# A round should last long enough that the parent↔worker round trip (~1 ms) is noise.
TARGET_ROUND_S = {Profile.QUICK: 0.25, Profile.FULL: 0.5}


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
    rounds: int
    warmup_rounds: int
    max_steps_per_round: int
    sample_interval: float
    comm_sizes: tuple[int, ...]
    comm_iters: int
    bucket_cap_sweep: tuple[float, ...]

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["name"] = self.name.value
        return out


def _int_list(env: str, raw: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in raw.split(",") if v.strip())
    except ValueError:
        raise ValueError(f"{env} must be a comma-separated list of integers, got {raw!r}") from None
    if not values or any(v < 1 for v in values):
        raise ValueError(f"{env} must list integers >= 1, got {raw!r}")
    return values


def _str_list(raw: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in raw.split(",") if v.strip())


def resolve_profile(
    name: str | None = None,
    *,
    cuda_count: int,
    cpu_count: int | None = None,
    environ: dict[str, str] | None = None,
) -> ProfileConfig:
    """Build the profile from ``DPBENCH_PROFILE`` (default: ``full`` with CUDA, else ``quick``).

    ``DPBENCH_DEVICE``, ``DPBENCH_WORLD_SIZES`` ("1,2,4") and ``DPBENCH_WORKLOADS`` ("mlp,lenet")
    override the profile's choices.
    """
    from dpbench.comm import default_sizes

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
            rounds=5,
            warmup_rounds=1,
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
            rounds=10,
            warmup_rounds=2,
            max_steps_per_round=50,
            sample_interval=0.05,
            comm_sizes=tuple(default_sizes(max_bytes=256 << 20, factor=4)),
            comm_iters=20,
            bucket_cap_sweep=(1.0, 5.0, 25.0, 100.0),
        )
    world_sizes = tuple(range(1, max(max_world, 1) + 1))
    if env.get("DPBENCH_WORLD_SIZES"):
        world_sizes = _int_list("DPBENCH_WORLD_SIZES", env["DPBENCH_WORLD_SIZES"])
    if env.get("DPBENCH_WORKLOADS"):
        config["workloads"] = _str_list(env["DPBENCH_WORKLOADS"])
        config["scaling_workloads"] = config["workloads"][:1]
        config["knob_workload"] = config["workloads"][0]
    return ProfileConfig(name=profile, device=device, world_sizes=world_sizes, **config)


@dataclass(kw_only=True, frozen=True)
class TrainingCase:
    """One benchmarked configuration; ``id`` is the readable pytest id (``ddp-mlp-w2``)."""

    strategy: str
    workload: Any  # a registered name or a dpbench.Workload
    world_size: int
    global_batch: int
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        parts = [self.strategy, str(getattr(self.workload, "name", self.workload)), f"w{self.world_size}"]
        parts += [f"{k}={v}" for k, v in sorted(self.options.items())]
        return "-".join(parts)


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


def steps_for_round(step_time: float, target_round_s: float, max_steps: int) -> int:
    """Steps per timed round so that one round lasts about ``target_round_s``."""
    if step_time <= 0 or not math.isfinite(step_time):
        return 1
    return max(1, min(max_steps, math.ceil(target_round_s / step_time)))


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


def training_extra_info(
    *, run_info: dict[str, Any], merged: StepStats, steps_per_round: int, profile: ProfileConfig, suite: str,
    sampler_summary: dict[str, Any] | None, timeline: str | None,
) -> dict[str, Any]:
    """The documented ``extra_info`` (schema 1) of one training benchmark."""
    sampler = dict(sampler_summary or {})
    sampler["timeline"] = timeline
    return {
        "schema": SCHEMA_VERSION,
        "kind": "training",
        "suite": suite,
        "profile": profile.name.value,
        "strategy": run_info["strategy"],
        "options": dict(run_info.get("options") or {}),  # resolved: defaults included
        "workload": run_info["workload"],
        "world_size": run_info["world_size"],
        "device_type": run_info["device_type"],
        "backend": run_info.get("backend"),
        "global_batch": run_info["global_batch"],
        "per_replica_batch": list(run_info["per_replica_batch"]),
        "steps_per_round": steps_per_round,
        "samples_per_s": merged.samples_per_s,
        "step_time_p50": statistics.median(merged.step_times),
        "step_time_p95": percentile(merged.step_times, 95),
        "phases": merged.phases,
        "peak_memory_bytes": merged.peak_memory_bytes,
        "sampler": sampler,
        "threads_per_worker": run_info.get("threads_per_worker"),
        "seed": run_info["seed"],
        "lr": run_info.get("lr"),
        "final_loss": merged.losses[-1] if merged.losses else None,
    }


def measure_training(
    benchmark: Any,
    case: TrainingCase,
    *,
    profile: ProfileConfig,
    suite: str,
    timeline_path: Callable[[str], tuple[Path, str]] | None = None,
    seed: int = 0,
    lr: float = 0.05,
) -> tuple[dict[str, Any], StepStats]:
    """Launch ``case`` (outside the timed region), warm up, time rounds of ``run.step(k)``.

    ``benchmark`` is pytest-benchmark's fixture. ``timeline_path(name)`` returns where to write
    the sampler timeline and the path to record in ``extra_info``. Returns the extra_info
    (also stored on ``benchmark.extra_info``) and the merged step statistics.
    """
    import dpbench
    from dpbench.sampler import ResourceSampler

    with dpbench.launch(case.strategy, case.workload, world_size=case.world_size, global_batch=case.global_batch,
                        device=profile.device, seed=seed, lr=lr, **case.options) as run:
        # Untimed: the first steps pay for allocator warm-up and DDP's bucket rebuild.
        probe = run.step(2)
        k = steps_for_round(min(probe.step_times), TARGET_ROUND_S[profile.name], profile.max_steps_per_round)
        measured: list[StepStats] = []
        calls = {"n": 0}

        def one_round() -> StepStats:
            stats = run.step(k)
            calls["n"] += 1
            if calls["n"] > profile.warmup_rounds:
                measured.append(stats)
            return stats

        devices = [d for d in run.info.get("devices", []) if str(d).startswith("cuda")]
        with ResourceSampler(interval=profile.sample_interval, pids=run.pids, devices=devices or None) as sampler:
            last = benchmark.pedantic(one_round, rounds=profile.rounds, warmup_rounds=profile.warmup_rounds,
                                      iterations=1)
        if not measured:
            # --benchmark-disable runs the target once, with no warm-up: keep that one round.
            measured.append(last)
        summary = sampler.summary()
        recorded = None
        if timeline_path is not None:
            # The suite is part of the name: the same case id (ddp-mlp-w2) appears in several suites.
            target, recorded = timeline_path(f"{suite}-{case.id}")
            sampler.save(target)
        merged = merge_step_stats(measured)
        info = training_extra_info(run_info=run.info, merged=merged, steps_per_round=k, profile=profile,
                                   suite=suite, sampler_summary=summary, timeline=recorded)
        info["requested_options"] = dict(case.options)  # what the case asked for: the short label
    benchmark.extra_info.update(info)
    return info, merged
