"""Synthetic dpbench runs in pytest-benchmark's saved format, for the report/compare tests.

The layout follows what pytest-benchmark 5 writes with --benchmark-save-data (checked by
test_report_load.py against a file produced by a real pytest-benchmark run) plus dpbench's
extra_info schema 1. Numbers are drawn from seeded distributions so each test knows the truth.
"""
from __future__ import annotations

import csv
import json
import random
import statistics
from pathlib import Path
from typing import Any

MACHINE_ID = "Linux-CPython-3.11-64bit"
XSS = "<script>alert(1)</script>"


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


def bench_id(case: tuple) -> str:
    suite, workload, strategy, options, ws, _ = case
    opts = "-".join(f"{k}{v}" for k, v in options.items())
    return f"test_{suite}[{strategy}{'-' + opts if opts else ''}-{workload}-w{ws}]"


def _stats(data: list[float]) -> dict[str, Any]:
    ordered = sorted(data)
    q = statistics.quantiles(ordered, n=4) if len(ordered) > 1 else [ordered[0]] * 3
    mean = statistics.fmean(ordered)
    return {
        "min": ordered[0], "max": ordered[-1], "mean": mean,
        "stddev": statistics.stdev(ordered) if len(ordered) > 1 else 0.0,
        "rounds": len(ordered), "median": statistics.median(ordered), "iqr": q[2] - q[0],
        "q1": q[0], "q3": q[2], "iqr_outliers": 0, "stddev_outliers": 0, "outliers": "0;0",
        "ld15iqr": ordered[0], "hd15iqr": ordered[-1], "ops": 1 / mean, "total": sum(ordered),
        "iterations": 1, "data": list(data),
    }


def _benchmark(name: str, group: str, extra: dict, data: list[float], *, save_data: bool) -> dict:
    stats = _stats(data)
    if not save_data:
        del stats["data"]
    return {
        "group": group, "name": name, "fullname": f"suites/test_{extra.get('suite', 'x')}.py::{name}",
        "params": {"case": name}, "param": name.split("[")[-1].rstrip("]"), "extra_info": extra,
        "options": {"disable_gc": False, "timer": "perf_counter", "min_rounds": len(data),
                    "max_time": 1.0, "min_time": 5e-06, "warmup": False},
        "stats": stats,
    }


def _write_timeline(path: Path, rng: random.Random, world_size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    cols = ["time", "device", "mark", "gpu_util_pct", "mem_util_pct", "mem_used_bytes", "cpu_pct", "rss_bytes"]
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        w.writerow([0.05, "mark", "warmup done", "", "", "", "", ""])
        for i in range(20):
            t = i * 0.1
            w.writerow([t, "cpu", "", "", "", "", 50 + rng.random() * 40, ""])
            for d in range(world_size):
                extra = 1.4 if d == 0 else 1.0  # DataParallel's device 0 carries more
                w.writerow([t, f"cuda:{d}", "", 60 + rng.random() * 35, 30, int(2e9 * extra * (1 + i / 40)),
                            "", ""])


def make_run(directory: Path, *, number: int = 1, name: str = "synth", machine_id: str = MACHINE_ID,
             **kwargs: Any) -> Path:
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


def make_doc(
    *, run_dir: Path | None = None, stem: str = "0001_synth", number: int = 1, seed: int = 0, rounds: int = 10,
    noise: float = 0.03, slowdown: dict[str, float] | None = None, save_data: bool = True,
    machine: dict[str, Any] | None = None, cases: list[tuple] | None = None, comm: bool = True,
    timelines: bool = True, extra_benchmarks: list[dict] | None = None,
) -> dict[str, Any]:
    """A pytest-benchmark document. ``slowdown`` maps a benchmark name to a factor on its
    true step time; timelines are written only when ``run_dir`` is given."""
    rng = random.Random(seed)
    slowdown = slowdown or {}
    benchmarks = []
    for case in (TRAINING_CASES if cases is None else cases):
        suite, workload, strategy, options, ws, base = case
        bname = bench_id(case)
        steps, batch = 4, 64
        true_step = base * slowdown.get(bname, 1.0)
        data = [true_step * steps * rng.lognormvariate(0, noise) for _ in range(rounds)]
        per_step = sorted(d / steps for d in data)
        extra: dict[str, Any] = {
            "schema": 1, "kind": "training", "profile": "quick", "suite": suite, "strategy": strategy,
            "options": options, "workload": workload, "world_size": ws, "device_type": "cuda",
            "backend": "nccl" if ws > 1 else None, "seed": 0, "threads_per_worker": 1,
            "global_batch": batch, "per_replica_batch": [batch // ws] * ws, "steps_per_round": steps,
            "samples_per_s": batch / statistics.fmean(per_step), "step_time_p50": statistics.median(per_step),
            "step_time_p95": per_step[int(0.95 * (len(per_step) - 1))],
            "peak_memory_bytes": {f"cuda:{d}": int(3e8 * (1.6 if d == 0 and strategy == "dp" else 1.0))
                                  for d in range(ws)},
            "phases": {"forward": true_step * 0.3, "backward": true_step * 0.5, "optimizer": true_step * 0.1,
                       "communication": true_step * 0.1},
            "sampler": {"backend": "nvml", "sample_count": 20, "interval": 0.1, "devices": {}, "errors": []},
        }
        if suite == "dp_phases":
            extra["phases"] = {"scatter": true_step * 0.1, "replicate": true_step * 0.2, "apply": true_step * 0.3,
                               "gather": true_step * 0.1, "backward": true_step * 0.3}
        if suite == "scaling":
            single = 64 / 0.020
            extra["baseline_samples_per_s"] = single
            extra["scaling_efficiency"] = extra["samples_per_s"] / (ws * single)
        if run_dir is not None and timelines and suite == "throughput" and workload == "mlp" and ws > 1:
            rel = f"timelines/{stem}/{bname.replace('[', '_').replace(']', '')}.csv"
            _write_timeline(run_dir / rel, rng, ws)
            extra["sampler"]["timeline"] = rel
        benchmarks.append(_benchmark(bname, f"{suite}-{workload}", extra, data, save_data=save_data))
    if comm:
        for size in COMM_SIZES:
            t = 20e-6 + size / 40e9
            data = [t * rng.lognormvariate(0, noise) for _ in range(rounds)]
            algbw = size / statistics.median(data) / 1e9
            extra = {"schema": 1, "kind": "collective", "profile": "quick", "suite": "comm",
                     "collective": "all_reduce", "size_bytes": size, "dtype": "float32", "world_size": 2,
                     "device_type": "cuda", "backend": "nccl", "seed": 0, "threads_per_worker": 1,
                     "time_s": statistics.median(data), "algbw_gbps": algbw, "busbw_gbps": algbw * 2 * (2 - 1) / 2}
            benchmarks.append(_benchmark(f"test_comm[all_reduce-{size}-w2]", "comm", extra, data, save_data=save_data))
    benchmarks.extend(extra_benchmarks or [])
    return {
        "machine_info": machine or default_machine(),
        "commit_info": {"id": f"{seed:040x}", "time": "2026-11-29T08:00:00+00:00", "author_time": None,
                        "dirty": False, "project": "dpbench", "branch": "main"},
        "benchmarks": benchmarks,
        "datetime": f"2026-11-29T08:{number % 60:02d}:00+00:00",
        "version": "5.3.1",
    }


def default_machine(**overrides: Any) -> dict[str, Any]:
    machine = {
        "node": "gpu-runner-1", "processor": "x86_64", "machine": "x86_64", "python_version": "3.11.7",
        "system": "Linux", "release": "6.1", "cpu": {"brand_raw": "AMD EPYC", "count": 16},
        "dpbench": {"version": "0.1.0", "lock_hash": "abc123", "profile": "quick"},
        "gpus": [{"name": "NVIDIA H100 80GB HBM3", "memory_bytes": 85e9}] * 4, "gpu_count": 4,
        "driver": "550.54", "cuda": "12.4", "nccl": "2.21.5", "torch": "2.13.0", "cpu_count": 16,
        "threads_per_worker": 1,
    }
    machine.update(overrides)
    return machine
