#!/usr/bin/env python
"""Hand-written gradient allreduce (per-param / bucketed / overlap) against DDP.

All four runs train the same workload with the same world size, global batch and threads.
They stay up side by side and take turns (short interleaved rounds) so machine noise hits
them alike; the table shows median step times, the non-hidden communication phase, and
each one relative to DDP. Target: ``overlap`` within 10 % of DDP.

    .venv/bin/python -m benchmarks.allreduce_vs_ddp [--workload mlp] [--world-size 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import dpbench
from dpbench.launcher import available_cores

CONFIGS = [
    ("ddp", {}),
    ("allreduce", {"mode": "per-param"}),
    ("allreduce", {"mode": "bucketed"}),
    ("allreduce", {"mode": "overlap"}),
]


def label(strategy: str, options: dict) -> str:
    return strategy if not options else f"{strategy} {options['mode']}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="mlp")
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--global-batch", type=int, default=64)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--bucket-cap-mb", type=float, default=25.0, help="for both DDP and allreduce")
    parser.add_argument("--steps", type=int, default=3, help="steps per round")
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args(argv)
    if args.rounds * args.steps < 2:  # the p95 column is a quantile of the step times
        parser.error(f"--rounds x --steps: expected 2 or more step times, found {args.rounds * args.steps}")

    common = dict(world_size=args.world_size, global_batch=args.global_batch, device=args.device, seed=0, lr=0.05)
    runs = []
    try:
        for strategy, options in CONFIGS:
            runs.append(dpbench.launch(strategy, args.workload, **common, bucket_cap_mb=args.bucket_cap_mb, **options))
        for run in runs:
            run.step(2)  # warm-up, untimed (DDP rebuilds its buckets after the first step)
        times: list[list[float]] = [[] for _ in runs]
        comm: list[list[float]] = [[] for _ in runs]
        for r in range(args.rounds):
            # Rotate the order so no configuration always runs right after the same one.
            for i in [(r + j) % len(runs) for j in range(len(runs))]:
                stats = runs[i].step(args.steps)
                times[i] += stats.step_times
                comm[i].append(stats.phases.get("communication", float("nan")))
    finally:
        for run in runs:
            run.close()

    info = runs[0].info
    print(
        f"workload {args.workload}, world size {args.world_size}, {info.backend} on {args.device}, "
        f"global batch {args.global_batch}, {info.threads_per_worker} thread(s)/rank, "
        f"{args.rounds} rounds x {args.steps} steps, load average {os.getloadavg()[0]:.1f} on {available_cores()} cores"
    )
    ddp_median = statistics.median(times[0])
    print(f"{'strategy':<22}{'median ms':>11}{'p95 ms':>9}{'samples/s':>11}{'comm ms':>9}{'vs ddp':>9}")
    for (strategy, options), t, c in zip(CONFIGS, times, comm):
        median = statistics.median(t)
        p95 = statistics.quantiles(t, n=20)[-1]
        comm_ms = statistics.median(c) * 1e3
        comm_text = "-" if comm_ms != comm_ms else f"{comm_ms:.2f}"
        print(
            f"{label(strategy, options):<22}{median * 1e3:>11.2f}{p95 * 1e3:>9.2f}"
            f"{args.global_batch / median:>11.0f}{comm_text:>9}{(median / ddp_median - 1) * 100:>+8.1f}%"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
