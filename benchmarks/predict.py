#!/usr/bin/env python
"""How long ``dpbench predict RUN`` takes on a saved quick run, end to end in a fresh process
(interpreter start, reading the run, fitting the collectives, the memory estimates, printing).
Target: at most 5 s. Runs it ``--repeats`` times and prints each wall time and the median.

    .venv/bin/python -m benchmarks.predict [RUN] [--repeats 5]

RUN defaults to tests/predict/data/step_run.json (a real quick run, cut down); a whole saved quick
run (``dpbench run --profile quick``) is the target's case.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 5.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", nargs="?", default=str(ROOT / "tests" / "predict" / "data" / "step_run.json"))
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    argv = [
        sys.executable,
        "-c",
        "import sys; from dpbench.cli import main; sys.exit(main())",
        "predict",
        args.run,
        "--world-sizes",
        "8,16",
        "--gpus-per-node",
        "8",
        "--link",
        "inter=25GB/s",
    ]
    times, cpu = [], []
    for _ in range(args.repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
        times.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        # CPU time beside the wall time: on a shared machine the wall time includes others' load
        cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        if done.returncode != 0:
            print(done.stderr, file=sys.stderr)
            return done.returncode
    print("wall times: " + ", ".join(f"{t:.2f} s" for t in times))
    print("CPU times:  " + ", ".join(f"{t:.2f} s" for t in cpu))
    median = statistics.median(times)
    print(f"median {median:.2f} s against a target of {TARGET_S:.0f} s: {'met' if median <= TARGET_S else 'missed'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
