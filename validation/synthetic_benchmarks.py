"""One benchmark of a synthetic run (synthetic_runs.py): its trials drawn, its extra_info, its stats.

Numbers are drawn from seeded distributions so each test knows the truth:

- every trial of a case gets its own process factor, lognormal with CV ``trial_cv``;
- every round inside a trial gets lognormal noise ``noise`` on top;
- every trial's control is ``CONTROL_S × control_shift`` with 1% noise;
- ``pass_factors`` multiplies trial i of *every* case (the machine's speed during pass i);
  ``control_passes`` likewise multiplies the controls of trial i (a machine that drifts).
"""

from __future__ import annotations

import math
import random
import statistics
from typing import Any

CONTROL_S = 0.004


def _stats(data: list[float]) -> dict[str, Any]:
    ordered = sorted(data)
    q = statistics.quantiles(ordered, n=4) if len(ordered) > 1 else [ordered[0]] * 3
    mean = statistics.fmean(ordered)
    return {
        "min": ordered[0],
        "max": ordered[-1],
        "mean": mean,
        "stddev": statistics.stdev(ordered) if len(ordered) > 1 else 0.0,
        "rounds": len(ordered),
        "median": statistics.median(ordered),
        "iqr": q[2] - q[0],
        "q1": q[0],
        "q3": q[2],
        "iqr_outliers": 0,
        "stddev_outliers": 0,
        "outliers": "0;0",
        "ld15iqr": ordered[0],
        "hd15iqr": ordered[-1],
        "ops": 1 / mean,
        "total": sum(ordered),
        "iterations": 1,
        "data": list(data),
    }


def _benchmark(name: str, group: str, extra: dict, data: list[float], *, save_data: bool) -> dict:
    stats = _stats(data)
    if not save_data:
        del stats["data"]
    return {
        "group": group,
        "name": name,
        "fullname": f"suites/test_{extra.get('suite', 'x')}.py::{name}",
        "params": {"case": name},
        "param": name.split("[")[-1].rstrip("]"),
        "extra_info": extra,
        "options": {
            "disable_gc": False,
            "timer": "dpbench.measure.extra_info.WORKER_CLOCK",
            "min_rounds": len(data),
            "max_time": 1.0,
            "min_time": 5e-06,
            "warmup": False,
        },
        "stats": stats,
    }


def log_t_interval(values: list[float]) -> list[float] | None:
    """The writer's interval (schema2.md): a 95% t-interval of the logs, exp'd back."""
    from scipy import stats

    if len(values) < 2:
        return None
    logs = [math.log(v) for v in values]
    half = stats.t.ppf(0.975, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return [math.exp(statistics.fmean(logs) - half), math.exp(statistics.fmean(logs) + half)]


class _Trials:
    """Draws one case's trials: per-trial medians, all rounds (trial-major), controls."""

    def __init__(
        self,
        rng: random.Random,
        *,
        true_s: float,
        trials: int,
        rounds: int,
        noise: float,
        trial_cv: float,
        control_shift: float,
        pass_factors: list[float],
        control_passes: list[float] | None = None,
    ):
        self.medians, self.rounds, self.controls = [], [], []
        for t in range(trials):
            factor = rng.lognormvariate(0, trial_cv) * (pass_factors[t] if t < len(pass_factors) else 1.0)
            values = [true_s * factor * rng.lognormvariate(0, noise) for _ in range(rounds)]
            self.rounds += values
            self.medians.append(statistics.median(values))
            drift = control_passes[t] if control_passes and t < len(control_passes) else 1.0
            self.controls.append(CONTROL_S * control_shift * drift * rng.lognormvariate(0, 0.01))

    def info(self, *, rounds: int, first_order: int, n_cases: int, timelines: list, clock: list | None) -> dict:
        samplers = [{"backend": "nvml", "sample_count": 20, "errors": []} for _ in self.medians]
        if clock:
            samplers[-1]["clock_warnings"] = list(clock)
        cv = statistics.stdev(self.medians) / statistics.fmean(self.medians) if len(self.medians) > 1 else None
        return {
            "count": len(self.medians),
            "rounds_per_trial": rounds,
            "order": [first_order + t * n_cases for t in range(len(self.medians))],
            "started_at": [1.8e9 + t * 60.0 for t in range(len(self.medians))],
            "step_time_s": self.medians,
            "control_s": self.controls,
            "cv": cv,
            "sampler": samplers,
            "timelines": timelines,
        }


def _training_extra(case: tuple, drawn: _Trials, *, schema: int, steps: int, batch: int) -> dict[str, Any]:
    suite, workload, strategy, options, ws, base = case
    per_step = sorted(drawn.rounds)
    step = statistics.median(drawn.medians)
    extra: dict[str, Any] = {
        "schema": schema,
        "kind": "training",
        "profile": "quick",
        "suite": suite,
        "strategy": strategy,
        "options": options,
        "requested_options": options,
        "workload": workload,
        "world_size": ws,
        "device_type": "cuda",
        "backend": "nccl" if ws > 1 else None,
        "seed": 0,
        "threads_per_worker": 1,
        "global_batch": batch,
        "per_replica_batch": [batch // ws] * ws,
        "steps_per_round": steps,
        "step_time_p50": statistics.median(per_step),
        "step_time_p95": per_step[int(0.95 * (len(per_step) - 1))],
        "peak_memory_bytes": {f"cuda:{d}": int(3e8 * (1.6 if d == 0 and strategy == "dp" else 1.0)) for d in range(ws)},
        "phases": {"forward": base * 0.3, "backward": base * 0.5, "optimizer": base * 0.1, "communication": base * 0.1},
        "sampler": {"backend": "nvml", "sample_count": 20, "interval": 0.1, "devices": {}, "errors": []},
        "lr": 0.05,
        "final_loss": 2.0,
    }
    if suite == "dp_phases":
        extra["phases"] = {
            "scatter": base * 0.1,
            "replicate": base * 0.2,
            "apply": base * 0.3,
            "gather": base * 0.1,
            "backward": base * 0.3,
        }
    if schema == 1:
        extra["samples_per_s"] = batch / statistics.fmean(per_step)  # schema 1's own definition
        return extra
    ci = log_t_interval(drawn.medians)
    extra.update(
        case_key=f"{strategy}|{workload}|w{ws}|b{batch}|{sorted(options.items())}",
        step_time_s=step,
        step_time_ci95=ci,
        samples_per_s=batch / step,
        samples_per_s_ci95=[batch / ci[1], batch / ci[0]] if ci else None,
    )
    return extra


def _scaling(extra: dict, drawn: _Trials, single: list[float] | None, ws: int, batch: int) -> None:
    """Per-trial efficiency against the single-device trials of the same pass (paired)."""
    single = single or [0.020] * len(drawn.medians)
    per_trial = [(batch / t) / (ws * batch / s) for t, s in zip(drawn.medians, single)]
    extra["scaling_efficiency"] = statistics.median(per_trial)
    extra["scaling_efficiency_trials"] = per_trial
    extra["scaling_efficiency_ci95"] = log_t_interval(per_trial)
    extra["baseline_samples_per_s"] = batch / statistics.median(single)


def comm_id(size: int) -> str:
    return f"test_comm[all_reduce-{size}-w2]"


def _collective(
    rng: random.Random,
    size: int,
    *,
    schema: int,
    trials: int,
    rounds: int,
    noise: float,
    trial_cv: float,
    control_shift: float,
    order: int,
    n_cases: int,
    slowdown: dict,
    save_data: bool,
) -> dict:
    name = comm_id(size)
    true_s = (20e-6 + size / 40e9) * slowdown.get(name, 1.0)
    drawn = _Trials(
        rng,
        true_s=true_s,
        trials=trials,
        rounds=rounds,
        noise=noise,
        trial_cv=trial_cv,
        control_shift=control_shift,
        pass_factors=[],
    )
    time_s = statistics.median(drawn.medians)
    algbw = size / time_s / 1e9
    iters = 5
    extra = {
        "schema": schema,
        "kind": "collective",
        "profile": "quick",
        "suite": "comm",
        "collective": "all_reduce",
        "size_bytes": size,
        "size_source": "sweep",
        "dtype": "float32",
        "world_size": 2,
        "device_type": "cuda",
        "backend": "nccl",
        "seed": 0,
        "threads_per_worker": 1,
        "iters_per_round": iters,
        "time_s": time_s,
        "algbw_gbps": algbw,
        "busbw_gbps": algbw,
    }
    if schema == 2:
        extra.update(
            time_ci95=log_t_interval(drawn.medians),
            trials=drawn.info(rounds=rounds, first_order=order, n_cases=n_cases, timelines=[None] * trials, clock=None),
        )
        data = drawn.rounds  # seconds per call, worker clock
    else:
        # Schema 1 timed a round of `iters` calls in the calling process, round trip included:
        # round / iters is NOT the workers' time per call.
        data = [iters * v + 2e-3 for v in drawn.rounds]
    return _benchmark(name, "comm", extra, data, save_data=save_data)
