"""Synthetic dpbench runs in pytest-benchmark's saved format, for the report/compare tests.

The layout follows what pytest-benchmark 5 writes with --benchmark-save-data (checked by
test_report_load.py against a file produced by a real pytest-benchmark run) plus dpbench's
extra_info schema 2 (/tmp/brief/schema2.md; ``schema=1`` writes the old layout). Each benchmark
is built in synthetic_benchmarks.py, whose docstring says how its numbers are drawn (seeded,
so each test knows the truth).
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path
from typing import Any

from dpbench.stats import coefficient_of_variation
from validation.noise import NOISE, SeriesNoiseModel, draw_series
from validation.synthetic_benchmarks import CONTROL_S as CONTROL_S
from validation.synthetic_benchmarks import _benchmark, _collective, _scaling, _training_extra, _Trials
from validation.synthetic_benchmarks import comm_id as comm_id
from validation.synthetic_benchmarks import log_t_interval as log_t_interval

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


def synthetic_run(
    *,
    commit: str | None,
    date: str,
    levels: dict[str, float],
    rng: random.Random,
    noise: SeriesNoiseModel = NOISE,
    machine: dict | None = None,
    control_s: float = 0.004,
) -> dict:
    """A minimal schema-2 pytest-benchmark document: one training benchmark per entry of
    ``levels`` (pytest name -> true seconds per step), trials drawn from ``noise``, a steady
    control (1% noise). For the history tests and ``python -m benchmarks.history_scale``."""
    benchmarks = []
    for name, level in levels.items():
        (trials,) = draw_series([level], rng, noise)
        suite = name.split("[")[0].removeprefix("test_")
        workload = name.split("-")[-2] if name.count("-") >= 2 else "mlp"
        lo, hi = log_t_interval(trials)  # written by the suites, as in real schema-2 runs
        extra = {
            "schema": 2,
            "kind": "training",
            "suite": suite,
            "strategy": "ddp",
            "workload": workload,
            "world_size": 2,
            "global_batch": 64,
            "case_key": f"case|{name}",
            "step_time_s": sorted(trials)[len(trials) // 2],
            "step_time_ci95": [lo, hi],
            "trials": {
                "count": len(trials),
                "step_time_s": trials,
                "cv": coefficient_of_variation(trials),
                "control_s": [control_s * rng.lognormvariate(0, 0.01) for _ in trials],
            },
        }
        benchmarks.append(
            {
                "name": name,
                "fullname": f"suites/test_{suite}.py::{name}",
                "group": suite,
                "stats": {"median": extra["step_time_s"], "rounds": len(trials), "data": trials},
                "extra_info": extra,
            }
        )
    doc = {
        "machine_info": machine
        or {"node": "runner-1", "gpus": [{"name": "NVIDIA H100"}], "driver": "550.54", "torch": "2.13.0"},
        "commit_info": {"id": commit, "branch": "main", "dirty": False} if commit else {},
        "benchmarks": benchmarks,
        "datetime": date,
        "version": "5.3.1",
    }
    return doc
