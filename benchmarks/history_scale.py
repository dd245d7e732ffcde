#!/usr/bin/env python3
"""Time `dpbench history` over a synthetic history: COMMITS commits x BENCHMARKS benchmarks
(one run per commit, 5 trials each, from validation.noise), ordered by date (the
commits are not in any repository). Prints load+analysis time, render time (wall and CPU: on
a shared machine the CPU time is the one to trust) and page size.

Usage: python -m benchmarks.history_scale [--commits 500] [--benchmarks 70] [--dir /tmp/history-scale]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import time
from pathlib import Path

from dpbench.history.series import load_history, run_files
from dpbench.report.history_page import render_history_page
from validation.synthetic_runs import synthetic_run


def write(directory: Path, commits: int, benchmarks: int, seed: int = 19) -> None:
    rng = random.Random(seed)
    names = [
        f"test_throughput[ddp-{w}-w{i}]" for w in ("mlp", "lenet", "transformer", "resnet") for i in range(benchmarks)
    ][:benchmarks]
    slow = {names[3]: commits // 2, names[10 % benchmarks]: commits // 3}  # two real steps
    machine = directory / "runner-1"
    machine.mkdir(parents=True, exist_ok=True)
    for c in range(commits):
        levels = {n: 0.01 * (1 + i % 7) * (1.15 if c >= slow.get(n, commits) else 1.0) for i, n in enumerate(names)}
        doc = synthetic_run(commit=hashlib.sha1(str(c).encode()).hexdigest(), date="", levels=levels, rng=rng)
        doc["datetime"] = f"2026-{1 + c // 28 // 24 % 12:02d}-{1 + c // 24 % 28:02d}T{c % 24:02d}:00:00"
        (machine / f"{c + 1:04d}_c{c}.json").write_text(json.dumps(doc))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=500)
    parser.add_argument("--benchmarks", type=int, default=70)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/history-scale"))
    args = parser.parse_args(argv)
    if args.benchmarks < 4:  # write() plants its steps in the 4th and the (10 mod N)th series
        parser.error(f"--benchmarks: expected 4 or more, found {args.benchmarks}")
    if not any(args.dir.glob("*/*.json")):
        write(args.dir, args.commits, args.benchmarks)
    start, cpu = time.perf_counter(), time.process_time()
    history = load_history(run_files([args.dir]), cwd=Path("/"))
    loaded = time.perf_counter()
    page = render_history_page(history)
    done, cpu_done = time.perf_counter(), time.process_time()
    out = args.dir.parent / "history-scale.html"
    out.write_text(page)
    print(
        f"{len(history.series)} series x {len(history.commits)} commits: load + change points "
        f"{loaded - start:.1f} s, render {done - loaded:.1f} s, total {done - start:.1f} s wall, "
        f"{cpu_done - cpu:.1f} s CPU (this process); page {len(page) / 1e6:.2f} MB; "
        f"{len(history.changes())} changes reported ({out})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
