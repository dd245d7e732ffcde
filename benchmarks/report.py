#!/usr/bin/env python3
"""How long ``dpbench report`` takes and how large its page is, for 2, 4, 10 and 20 runs.

The runs are synthetic (validation/synthetic_runs.py): ~70 training benchmarks in six suites plus the
collectives, 4 trials × 3 rounds each, a timeline per trial of every training case, and, as the
real suites write them, one measurement per ``case_key`` published by every suite that runs it. Each size
is rendered ``--repeat`` times in a fresh process (imports included, as the CLI pays them);
the table shows the median and the spread.

    .venv/bin/python -m benchmarks.report              # 2, 4, 10, 20 runs
    .venv/bin/python -m benchmarks.report --runs 2 --repeat 1

Timings need an idle machine: on a shared one they only say roughly where the time goes.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from validation import synthetic_runs

ROOT = Path(__file__).resolve().parent.parent

# Every training suite records timelines, as the real suites do.
TIMELINE_SUITES = ("throughput", "scaling", "ddp_knobs", "allreduce", "dp_phases")
RENDER = """
import sys, time
t0 = time.perf_counter()
from dpbench.report import write_report
write_report(sys.argv[2:], sys.argv[1])
print(time.perf_counter() - t0)
print(__import__("dpbench").__file__, file=sys.stderr)
"""


def shared_trials(path: Path) -> None:
    """Make the benchmarks of one ``case_key`` carry the same numbers, as a real session does
    (each case is measured once and published by every suite that runs it)."""
    doc = json.loads(path.read_text())
    groups: dict[str, list[dict]] = {}
    for bench in doc["benchmarks"]:
        key = bench["extra_info"].get("case_key")
        if key:
            groups.setdefault(key, []).append(bench)
    for benches in groups.values():
        # The one that recorded timelines measured it (synthetic_runs writes them for one suite only).
        ref = next((b for b in benches if b["extra_info"].get("sampler", {}).get("timeline")), benches[0])
        for bench in benches:
            if bench is ref:
                continue
            for field in (
                "trials",
                "step_time_s",
                "step_time_ci95",
                "samples_per_s",
                "samples_per_s_ci95",
                "peak_memory_bytes",
                "step_time_p50",
                "step_time_p95",
                "sampler",
                "phases",
            ):
                if field in ref["extra_info"]:
                    bench["extra_info"][field] = ref["extra_info"][field]
            bench["stats"] = ref["stats"]
    path.write_text(json.dumps(doc))


def make_runs(root: Path, n: int) -> list[Path]:
    runs = []
    for i in range(1, n + 1):
        path = synthetic_runs.make_run(
            root,
            number=i,
            name=f"r{i}",
            seed=i,
            cases=synthetic_runs.many_cases(),
            trials=4,
            rounds=3,
            timeline_suites=TIMELINE_SUITES,
        )
        shared_trials(path)
        runs.append(path)
    return runs


def render_once(runs: list[Path], out: Path, source: str | None) -> tuple[float, float, float, int]:
    """(wall seconds of the process, its CPU seconds, seconds inside write_report, bytes written).

    CPU seconds (user + system of the child) move much less than wall time when other work
    shares the machine, so they are the number to compare on a busy one."""
    env = dict(os.environ)
    if source:  # another checkout's dpbench (e.g. main): before / after
        # PYTHONPATH comes before site-packages, where the editable install of this checkout is
        # found; -P keeps the working directory (this checkout) off the path.
        env["PYTHONPATH"] = str(Path(source).resolve())
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-P", "-c", RENDER, str(out), *map(str, runs)],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"render of {len(runs)} runs failed:\n{proc.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, float(proc.stdout.strip().splitlines()[-1]), out.stat().st_size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[2, 4, 10, 20], help="run counts to render")
    parser.add_argument("--repeat", type=int, default=3, help="renders per run count (median reported)")
    parser.add_argument("--keep", metavar="DIR", help="write the reports into DIR instead of a temp dir")
    parser.add_argument("--source", metavar="DIR", help="render with the dpbench of another checkout (e.g. /work/main)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="dpbench-bench-report-") as tmp:
        out_dir = Path(args.keep or tmp)
        out_dir.mkdir(parents=True, exist_ok=True)
        results = Path(tmp) / "results"
        all_runs = make_runs(results, max(args.runs))
        n_bench = len(json.loads(all_runs[0].read_text())["benchmarks"])
        print(f"{n_bench} benchmarks per run; {args.repeat} render(s) per size in a fresh process each")
        print("| runs | wall s (median, min–max) | CPU s (median) | in write_report s | page MB |")
        print("|---|---|---|---|---|")
        for n in args.runs:
            measured = [
                render_once(all_runs[:n], out_dir / f"report-{n}.html", args.source) for _ in range(args.repeat)
            ]
            walls, cpus, inner, sizes = zip(*measured)
            print(
                f"| {n} | {statistics.median(walls):.2f} ({min(walls):.2f}–{max(walls):.2f}) | "
                f"{statistics.median(cpus):.2f} | {statistics.median(inner):.2f} | {sizes[-1] / 1e6:.2f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
