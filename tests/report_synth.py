"""Synthetic dpbench runs in pytest-benchmark's saved format, for the report/compare tests.

The layout follows what pytest-benchmark 5 writes with --benchmark-save-data (checked by
test_report_load.py against a file produced by a real pytest-benchmark run) plus dpbench's
extra_info schema 2 (/tmp/brief/schema2.md; ``schema=1`` writes the old layout). Numbers are
drawn from seeded distributions so each test knows the truth:

- every trial of a case gets its own process factor, lognormal with CV ``trial_cv``;
- every round inside a trial gets lognormal noise ``noise`` on top;
- every trial's control is ``CONTROL_S × control_shift`` with 1% noise;
- ``pass_factors`` multiplies trial i of *every* case (the machine's speed during pass i);
  ``control_passes`` likewise multiplies the controls of trial i (a machine that drifts).
"""

from __future__ import annotations

import csv
import json
import math
import random
import statistics
from pathlib import Path
from typing import Any

MACHINE_ID = "Linux-CPython-3.11-64bit"
XSS = "<script>alert(1)</script>"
CONTROL_S = 0.004


def write_json(path: Path, doc: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


# (suite, workload, strategy, options, world size, base seconds per step)
TRAINING_CASES = [
    ("throughput", "mlp", "single", {}, 1, 0.020),
    ("throughput", "mlp", "dp", {}, 2, 0.016),
    ("throughput", "mlp", "ddp", {}, 2, 0.012),
    ("throughput", "mlp", "allreduce", {"mode": "overlap"}, 2, 0.013),
    ("throughput", "convnet", "single", {}, 1, 0.050),
    ("throughput", "convnet", "ddp", {}, 2, 0.030),
    ("throughput", "convnet", "manual", {}, 2, 0.045),
    ("scaling", "mlp", "ddp", {}, 1, 0.021),
    ("scaling", "mlp", "ddp", {}, 4, 0.007),
    ("ddp_knobs", "mlp", "ddp", {"bucket_cap_mb": 5}, 2, 0.0125),
    ("dp_phases", "mlp", "dp", {}, 2, 0.016),
]
COMM_SIZES = [4096, 65536, 1 << 20, 16 << 20]


def many_cases() -> list[tuple]:
    """Over 70 training cases in five suites (plus the collectives): the "no case dropped" runs."""
    cases = []
    for workload, base in (("mlp", 0.02), ("lenet", 0.03), ("transformer", 0.1)):
        cases.append(("throughput", workload, "single", {}, 1, base))
        for strategy, speed in (("dp", 0.8), ("ddp", 0.6), ("manual", 0.9), ("allreduce", 0.65)):
            for ws in (2, 3, 4):
                cases.append(("throughput", workload, strategy, {}, ws, base * speed * 2 / ws))
    for ws in (1, 2, 3, 4):
        cases.append(("scaling", "mlp", "single" if ws == 1 else "ddp", {}, ws, 0.02 * (1.1 if ws > 1 else 1)))
    for mb in (1, 5, 25, 100):
        for view in (False, True):
            cases.append(("ddp_knobs", "mlp", "ddp", {"bucket_cap_mb": mb, "gradient_as_bucket_view": view}, 2, 0.0125))
    for static in (False, True):
        for accumulation in (1, 2):
            cases.append(
                ("ddp_knobs", "mlp", "ddp", {"static_graph": static, "accumulation_steps": accumulation}, 2, 0.012)
            )
    for hook in ("fp16", "bf16", "powersgd"):
        cases.append(("ddp_knobs", "mlp", "ddp", {"comm_hook": hook}, 2, 0.011))
    for ws in (1, 2, 3, 4):
        cases.append(("scaling", "lenet", "single" if ws == 1 else "ddp", {}, ws, 0.03 * (1.1 if ws > 1 else 1)))
    for mode in ("per-param", "bucketed", "overlap"):
        cases.append(("allreduce", "mlp", "allreduce", {"mode": mode}, 2, 0.013))
    cases.append(("allreduce", "mlp", "ddp", {}, 2, 0.012))
    for ws in (2, 3, 4):
        cases.append(("dp_phases", "mlp", "dp", {}, ws, 0.016))
    return cases


def bench_id(case: tuple) -> str:
    suite, workload, strategy, options, ws, _ = case
    opts = "-".join(f"{k}{v}" for k, v in options.items())
    return f"test_{suite}[{strategy}{'-' + opts if opts else ''}-{workload}-w{ws}]"


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


def _write_timeline(path: Path, rng: random.Random, world_size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    cols = ["time", "device", "mark", "gpu_util_pct", "mem_util_pct", "mem_used_bytes", "cpu_pct", "rss_bytes"]
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        w.writerow([0.05, "mark", "warmup done", "", "", "", "", ""])
        for i in range(12):
            t = i * 0.1
            w.writerow([t, "cpu", "", "", "", "", 50 + rng.random() * 40, ""])
            for d in range(world_size):
                extra = 1.4 if d == 0 else 1.0  # DataParallel's device 0 carries more
                w.writerow([t, f"cuda:{d}", "", 60 + rng.random() * 35, 30, int(2e9 * extra * (1 + i / 40)), "", ""])


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


def make_run(
    directory: Path, *, number: int = 1, name: str = "synth", machine_id: str = MACHINE_ID, **kwargs: Any
) -> Path:
    """Write ``directory/<machine_id>/<number:04d>_<name>.json`` and return its path.

    Keyword arguments are those of :func:`make_doc`.
    """
    run_dir = directory / machine_id
    run_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{number:04d}_{name}"
    doc = make_doc(run_dir=run_dir, stem=stem, number=number, **kwargs)
    path = run_dir / f"{stem}.json"
    path.write_text(json.dumps(doc, indent=1))
    return path


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


def make_doc(
    *,
    run_dir: Path | None = None,
    stem: str = "0001_synth",
    number: int = 1,
    seed: int = 0,
    schema: int = 2,
    trials: int = 6,
    rounds: int = 5,
    noise: float = 0.03,
    trial_cv: float = 0.03,
    slowdown: dict[str, float] | None = None,
    control_shift: float = 1.0,
    pass_factors: list[float] | None = None,
    control_passes: list[float] | None = None,
    save_data: bool = True,
    machine: dict[str, Any] | None = None,
    cases: list[tuple] | None = None,
    comm: bool = True,
    timelines: bool = True,
    timeline_suites: tuple[str, ...] = ("dp_phases",),
    clock_warnings: dict[str, list[str]] | None = None,
    extra_benchmarks: list[dict] | None = None,
) -> dict[str, Any]:
    """A pytest-benchmark document. ``slowdown`` maps a benchmark name to a factor on its true
    step time; ``schema=1`` writes one trial and round times of ``steps_per_round`` steps;
    timelines are written only when ``run_dir`` is given."""
    rng = random.Random(seed)
    slowdown = slowdown or {}
    trials = 1 if schema == 1 else trials
    cases = TRAINING_CASES if cases is None else cases
    n_cases = len(cases) + (len(COMM_SIZES) if comm else 0)
    benchmarks, singles = [], {}
    for index, case in enumerate(cases):
        suite, workload, strategy, options, ws, base = case
        bname = bench_id(case)
        steps, batch = 4, 64
        drawn = _Trials(
            rng,
            true_s=base * slowdown.get(bname, 1.0),
            trials=trials,
            rounds=rounds,
            noise=noise,
            trial_cv=trial_cv,
            control_shift=control_shift,
            pass_factors=pass_factors or [],
            control_passes=control_passes,
        )
        extra = _training_extra(case, drawn, schema=schema, steps=steps, batch=batch)
        if strategy == "single":
            singles[(suite, workload)] = drawn.medians
        if suite == "scaling" and strategy != "single":
            _scaling(extra, drawn, singles.get((suite, workload)), ws, batch)
        rels: list = [None] * trials
        if run_dir is not None and timelines and suite in timeline_suites:
            rels = []
            for t in range(trials):
                rel = f"timelines/{stem}/{bname.replace('[', '_').replace(']', '')}-t{t}.csv"
                _write_timeline(run_dir / rel, rng, ws)
                rels.append(rel)
            extra["sampler"]["timeline"] = rels[0]
        if schema == 2:
            extra["trials"] = drawn.info(
                rounds=rounds,
                first_order=index,
                n_cases=n_cases,
                timelines=rels,
                clock=(clock_warnings or {}).get(bname),
            )
            data = drawn.rounds  # schema 2: seconds per step, worker clock
        else:
            data = [v * steps for v in drawn.rounds]  # schema 1: one round = run.step(k), parent clock
        benchmarks.append(_benchmark(bname, f"{suite}-{workload}", extra, data, save_data=save_data))
    if comm:
        for index, size in enumerate(COMM_SIZES, start=len(cases)):
            benchmarks.append(
                _collective(
                    rng,
                    size,
                    schema=schema,
                    trials=trials,
                    rounds=rounds,
                    noise=noise,
                    trial_cv=trial_cv,
                    control_shift=control_shift,
                    order=index,
                    n_cases=n_cases,
                    slowdown=slowdown,
                    save_data=save_data,
                )
            )
    benchmarks.extend(extra_benchmarks or [])
    return {
        "machine_info": machine or default_machine(),
        "commit_info": {
            "id": f"{seed:040x}",
            "time": "2026-11-29T08:00:00+00:00",
            "author_time": None,
            "dirty": False,
            "project": "dpbench",
            "branch": "main",
        },
        "benchmarks": benchmarks,
        "datetime": f"2026-11-29T08:{number % 60:02d}:00+00:00",
        "version": "5.3.1",
    }


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


def default_machine(**overrides: Any) -> dict[str, Any]:
    machine = {
        "node": "gpu-runner-1",
        "processor": "x86_64",
        "machine": "x86_64",
        "python_version": "3.11.7",
        "system": "Linux",
        "release": "6.1",
        "cpu": {"brand_raw": "AMD EPYC", "count": 16},
        "dpbench": {"version": "0.1.0", "lock_hash": "abc123", "profile": "quick"},
        "gpus": [{"name": "NVIDIA H100 80GB HBM3", "memory_bytes": 85e9}] * 4,
        "gpu_count": 4,
        "driver": "550.54",
        "cuda": "12.4",
        "nccl": "2.21.5",
        "torch": "2.13.0",
        "cpu_count": 16,
        "threads_per_worker": 1,
    }
    machine.update(overrides)
    return machine
