#!/usr/bin/env python
"""What does ``--dpbench-trace`` cost? The suites run untraced and traced, interleaved.

Each pass runs ``pytest suites/`` (or ``--suites``) twice in fresh sessions, once without and
once with ``--dpbench-trace``, the order alternating between passes so neither mode always runs
first; every session saves its run into a temporary results directory. Printed:

* wall time of each session and traced ÷ untraced per pass (the target: ≤ 1.5× on the quick
  profile), with the median over passes;
* the profiler's overhead per traced case: ``trace_breakdown.overhead.ratio`` (median traced step
  ÷ median timed step of the same trial), median and max over cases;
* the timed step time of every case traced ÷ untraced (tracing runs after the timed rounds, so
  these should differ only by the machine's noise between sessions);
* how far the two-pass exposed communication and the trace's lie apart (``difference_of_step``),
  the spread behind :data:`dpbench.traces.analysis.AGREEMENT_TOLERANCE`.

    .venv/bin/python -m benchmarks.trace_overhead [--passes 2] [--suites suites/] [-k EXPR] [--json out.json]

Environment (DPBENCH_PROFILE, DPBENCH_WORKLOADS, DPBENCH_TRIALS, ...) is passed through.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _session(storage: Path, name: str, traced: bool, suites: str, select: str | None) -> tuple[float, dict]:
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        suites,
        f"--benchmark-storage=file://{storage}",
        f"--benchmark-save={name}",
    ]
    cmd += ["-k", select] if select else []
    cmd += ["--dpbench-trace"] if traced else []
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
    (run,) = storage.glob(f"*/*_{name}.json")
    return wall, json.loads(run.read_text())


def _by_case(doc: dict) -> dict[str, dict]:
    return {b["fullname"]: b["extra_info"] for b in doc["benchmarks"] if b["extra_info"].get("kind") == "training"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--suites", default="suites/")
    parser.add_argument("-k", dest="select", default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    walls, overheads, timed, agreement = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="dpbench-trace-overhead-") as tmp:
        for i in range(args.passes):
            results = {}
            for traced in (False, True) if i % 2 == 0 else (True, False):
                name = f"p{i}{'traced' if traced else 'plain'}"
                results[traced] = _session(Path(tmp) / name, name, traced, args.suites, args.select)
            ratio = results[True][0] / results[False][0]
            walls.append({"untraced_s": results[False][0], "traced_s": results[True][0], "ratio": ratio})
            print(f"pass {i + 1}: untraced {results[False][0]:.1f} s, traced {results[True][0]:.1f} s: {ratio:.2f}×")
            plain, traced_cases = _by_case(results[False][1]), _by_case(results[True][1])
            for case, info in traced_cases.items():
                tb = info.get("trace_breakdown") or {}
                if (tb.get("overhead") or {}).get("ratio"):
                    overheads.append((case, tb["overhead"]["ratio"]))
                if tb.get("two_pass"):
                    agreement.append((case, tb["two_pass"]["difference_of_step"]))
                if case in plain:
                    timed.append((case, info["step_time_s"] / plain[case]["step_time_s"]))
    summary = {
        "wall": walls,
        "wall_ratio_median": statistics.median(w["ratio"] for w in walls),
        "overhead_median": statistics.median(r for _, r in overheads) if overheads else None,
        "overhead_max": max(overheads, key=lambda x: x[1]) if overheads else None,
        "timed_ratio_median": statistics.median(r for _, r in timed) if timed else None,
        "timed_ratio_range": [min(r for _, r in timed), max(r for _, r in timed)] if timed else None,
        "two_pass_difference_median": statistics.median(d for _, d in agreement) if agreement else None,
        "two_pass_difference_p90": sorted(d for _, d in agreement)[int(0.9 * (len(agreement) - 1))]
        if agreement
        else None,
        "cases_traced": len(overheads),
    }
    print(json.dumps(summary, indent=1))
    if args.json:
        args.json.write_text(
            json.dumps({"summary": summary, "overheads": overheads, "timed": timed, "agreement": agreement}, indent=1)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
