#!/usr/bin/env python
"""fsdp (both reshard settings) and zero against ddp: step time and memory per rank, side by side.

All runs are started first and stay up; their rounds are then interleaved (run A round 1, run B
round 1, …, with the order reversed every other pass), so a slow minute on a shared machine hits
every strategy alike. A round is one ``run.step(k)``; its number is seconds per step; the table
reports the median over rounds. Memory per rank comes from ``Run.case_metrics()`` (what each rank
holds after the timed steps, and its peak), taken once per run after all rounds.

Run: ``.venv/bin/python -m benchmarks.sharding [--workload transformer] [--world-size 2]
[--optimizer adamw] [--rounds 7] [--steps 5] [--global-batch 64] [--json PATH]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from contextlib import ExitStack
from pathlib import Path

import dpbench
from dpbench.measure.derive import derive

VARIANTS = (
    ("ddp", {}),
    ("zero", {}),
    ("fsdp", {"reshard_after_forward": True}),
    ("fsdp", {"reshard_after_forward": False}),
)


def label(strategy: str, options: dict) -> str:
    return strategy + "".join(f" {k}={v}" for k, v in options.items())


def measure(args: argparse.Namespace) -> list[dict]:
    with ExitStack() as stack:
        runs = {}
        for strategy, options in VARIANTS:
            run = dpbench.launch(
                strategy,
                args.workload,
                world_size=args.world_size,
                global_batch=args.global_batch,
                seed=0,
                lr=args.lr,
                optimizer=args.optimizer,
                **options,
            )
            stack.callback(run.close)
            run.step(2)  # untimed warm-up: allocator, DDP's bucket rebuild, first AdamW step
            runs[label(strategy, options)] = run
        rounds: dict[str, list[float]] = {name: [] for name in runs}
        names = list(runs)
        for r in range(args.rounds):
            for name in names if r % 2 == 0 else reversed(names):
                stats = runs[name].step(args.steps)
                rounds[name].append(stats.total_time / stats.steps)  # worker-measured seconds per step
        rows = []
        for name, run in runs.items():
            step = statistics.median(rounds[name])
            metrics = run.case_metrics()
            rows.append(
                {
                    "variant": name,
                    "step_time_s": step,
                    "round_times_s": rounds[name],
                    "samples_per_s": args.global_batch / step,
                    **metrics,
                    **derive(metrics, step_time_s=step, world_size=args.world_size),
                }
            )
        return rows


def mib(value: float) -> str:
    return f"{value / 2**20:.2f}"


def print_table(rows: list[dict], args: argparse.Namespace) -> None:
    ddp = rows[0]["step_time_s"]
    print(
        f"workload={args.workload} world_size={args.world_size} optimizer={args.optimizer} "
        f"global_batch={args.global_batch} rounds={args.rounds} x {args.steps} steps (median of rounds)"
    )
    # compute ms: the rank's compute alone (gradient sync off); comm ms: the step's collectives
    # replayed alone; exposed ms = step - compute (clamped at 0); overlap = hidden share of comm.
    print(
        f"{'variant':<34} {'step ms':>8} {'vs ddp':>7} {'tokens/s':>9} {'compute ms':>10} {'comm ms':>8} "
        f"{'exposed ms':>10} {'overlap':>7}  per rank: {'params':>7} {'grads':>7} {'optim':>7} {'peak RSS':>8} MiB"
    )
    for row in rows:
        cells = [f"{row['tokens_per_s']:.0f}" if row.get("tokens_per_s") else "-"]
        for key in ("compute_only_step_s", "collective_time_s", "exposed_comm_s"):
            cells.append(f"{row[key] * 1e3:.1f}" if row.get(key) is not None else "-")
        cells.append(f"{row['overlap_fraction']:.2f}" if row.get("overlap_fraction") is not None else "-")
        tokens, compute, comm, exposed, overlap = cells
        for m in row["memory_per_rank"]:
            head = (
                (
                    f"{row['variant']:<34} {row['step_time_s'] * 1e3:>8.1f} {row['step_time_s'] / ddp:>7.2f} "
                    f"{tokens:>9} {compute:>10} {comm:>8} {exposed:>10} {overlap:>7}"
                )
                if m["rank"] == 0
                else " " * 99
            )
            print(
                f"{head}  rank {m['rank']}:  {mib(m['params_bytes']):>7} {mib(m['grads_bytes']):>7} "
                f"{mib(m['optimizer_state_bytes']):>7} {mib(m['peak_bytes']):>8}"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workload", default="transformer")
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--optimizer", default="adamw", choices=["sgd", "adamw"])
    parser.add_argument("--global-batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds per variant (medians over these)")
    parser.add_argument("--steps", type=int, default=5, help="steps per round")
    parser.add_argument("--json", type=Path, help="also write the rows here as JSON")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.steps < 1:
        parser.error("--rounds and --steps must be >= 1")
    rows = measure(args)
    print_table(rows, args)
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
