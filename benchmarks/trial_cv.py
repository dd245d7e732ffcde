#!/usr/bin/env python
"""Does CPU pinning cut the between-trial variance of dpbench's measurements?

For each case, N fresh-process trials with pinning on and N with it off, interleaved
(trial i of every case, pinned and unpinned back to back, the order alternating between
trials so neither mode always runs first), so a slow minute of the machine lands on both
modes alike. A trial is what a suite trial does: ``dpbench.launch`` in fresh workers, 2
untimed steps, one untimed warm-up call of k steps, then 3 rounds of ``run.step(k)`` with
k ≈ ``--target-s`` seconds of steps (k is fixed per case from a calibration launch, so every
trial does the same work); the trial's value is the median per-step time over its rounds.

Printed per case: the between-trial coefficient of variation (stdev / mean over the N trial
values) with pinning on and off, a robust CV (1.4826 x MAD / median) beside it, the median
step time of each mode and their ratio, and how the workers were placed; then the median and
p90 of the CVs over the cases. Pinning is
switched with ``DPBENCH_PIN`` (read by every WorkerPool), so the suites' own code path runs.

    .venv/bin/python -m benchmarks.trial_cv [--trials 8] [--cases ddp-mlp-w2 ...] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import dpbench
from dpbench.launcher import available_cores

GLOBAL_BATCH = 64
UNTIMED_STEPS = 2
ROUNDS = 3
MODES = ("on", "off")  # DPBENCH_PIN=1 / 0


@dataclass(frozen=True, kw_only=True)
class Case:
    strategy: str
    workload: str
    world_size: int

    @property
    def id(self) -> str:
        return f"{self.strategy}-{self.workload}-w{self.world_size}"


CASES = {
    c.id: c
    for c in (
        Case(strategy="single", workload="mlp", world_size=1),
        Case(strategy="ddp", workload="mlp", world_size=2),
        Case(strategy="dp", workload="mlp", world_size=2),
        Case(strategy="allreduce", workload="mlp", world_size=2),
        Case(strategy="ddp", workload="lenet", world_size=2),
    )
}


def _launch(case: Case, mode: str):
    # Every WorkerPool reads DPBENCH_PIN when it starts: "1" leaves its default ("auto").
    os.environ["DPBENCH_PIN"] = "1" if mode == "on" else "0"
    return dpbench.launch(
        case.strategy,
        case.workload,
        world_size=case.world_size,
        global_batch=GLOBAL_BATCH,
        device="cpu",
        seed=0,
        lr=0.05,
    )


def calibrate(case: Case, target_s: float) -> int:
    """k such that one round of k steps takes about ``target_s`` (from an untimed launch)."""
    with _launch(case, "on") as run:
        run.step(UNTIMED_STEPS)
        probe = run.step(3)
    return max(1, round(target_s / max(min(probe.step_times), 1e-6)))


def placement(run) -> str:
    """How the workers were placed, read from outside (the affinity of each worker pid)."""
    sets = [sorted(os.sched_getaffinity(pid)) for pid in run.pids] if hasattr(os, "sched_getaffinity") else []
    return " ".join(",".join(map(str, s)) for s in sets) or "?"


def trial(case: Case, mode: str, k: int) -> tuple[float, str]:
    """One fresh-process trial → (median per-step seconds over its rounds, worker placement)."""
    with _launch(case, mode) as run:
        where = placement(run)
        run.step(UNTIMED_STEPS)  # allocator warm-up, DDP's bucket rebuild
        run.step(k)  # the warm-up call
        times = [t for _ in range(ROUNDS) for t in run.step(k).step_times]
    return statistics.median(times), where


def cv(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.fmean(values)


def robust_cv(values: list[float]) -> float:
    """1.4826 × MAD / median: the CV a normal sample would have, blind to one slow minute."""
    from scipy.stats import median_abs_deviation

    return float(median_abs_deviation(values, scale="normal") / statistics.median(values))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=8, help="fresh-process trials per case and mode (>= 2)")
    parser.add_argument(
        "--cases",
        nargs="+",
        default=list(CASES),
        metavar="CASE",
        help=f"cases to measure (default: all of {', '.join(CASES)})",
    )
    parser.add_argument("--target-s", type=float, default=0.2, help="seconds of steps per round")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    if args.trials < 2:
        parser.error(f"--trials must be an int >= 2 (a CV needs two trials), got {args.trials}")
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}")
    if not args.target_s > 0:
        parser.error(f"--target-s must be a positive number of seconds, got {args.target_s}")
    cases = [CASES[c] for c in args.cases]

    started, load_before = time.monotonic(), os.getloadavg()
    print(f"{available_cores()} usable cores; load average {load_before[0]:.2f} (1 min) at start")
    ks = {c.id: calibrate(c, args.target_s) for c in cases}
    values: dict[str, dict[str, list[float]]] = {c.id: {m: [] for m in MODES} for c in cases}
    where: dict[str, dict[str, set[str]]] = {c.id: {m: set() for m in MODES} for c in cases}
    for i in range(args.trials):
        for case in cases:
            for mode in MODES if i % 2 == 0 else MODES[::-1]:
                value, placed = trial(case, mode, ks[case.id])
                values[case.id][mode].append(value)
                where[case.id][mode].add(placed)
        print(f"  trial {i + 1}/{args.trials} done ({time.monotonic() - started:.0f} s)", flush=True)
    os.environ.pop("DPBENCH_PIN", None)
    load_after = os.getloadavg()

    rows = []
    for case in cases:
        v = values[case.id]
        rows.append(
            {
                "case": case.id,
                "k": ks[case.id],
                "cv_on": cv(v["on"]),
                "cv_off": cv(v["off"]),
                "robust_cv_on": robust_cv(v["on"]),
                "robust_cv_off": robust_cv(v["off"]),
                "median_ms_on": statistics.median(v["on"]) * 1e3,
                "median_ms_off": statistics.median(v["off"]) * 1e3,
                "cores_on": sorted(where[case.id]["on"]),
                "cores_off": sorted(where[case.id]["off"]),
                "trials_on": v["on"],
                "trials_off": v["off"],
            }
        )
    header = (
        f"{'case':<20} {'k':>4} {'CV on':>7} {'CV off':>7} {'rCV on':>7} {'rCV off':>7} {'ms on':>8} "
        f"{'ms off':>8} {'on/off':>7}  workers' cores on | off"
    )
    print(header)
    for r in rows:
        print(
            f"{r['case']:<20} {r['k']:>4} {r['cv_on']:>7.1%} {r['cv_off']:>7.1%} {r['robust_cv_on']:>7.1%} "
            f"{r['robust_cv_off']:>7.1%} {r['median_ms_on']:>8.3f} "
            f"{r['median_ms_off']:>8.3f} {r['median_ms_on'] / r['median_ms_off']:>7.3f}  "
            f"{' / '.join(r['cores_on'])} | {' / '.join(r['cores_off'])}"
        )
    summary = {}
    for mode in MODES:
        cvs = [r[f"cv_{mode}"] for r in rows]
        rcvs = [r[f"robust_cv_{mode}"] for r in rows]
        summary[mode] = {
            "median_cv": float(np.median(cvs)),
            "p90_cv": float(np.percentile(cvs, 90)),
            "median_robust_cv": float(np.median(rcvs)),
            "p90_robust_cv": float(np.percentile(rcvs, 90)),
        }
        print(
            f"pinning {mode:<3}: CV over {len(cvs)} cases: median {summary[mode]['median_cv']:.1%}, "
            f"p90 {summary[mode]['p90_cv']:.1%} (robust CV: median {summary[mode]['median_robust_cv']:.1%}, "
            f"p90 {summary[mode]['p90_robust_cv']:.1%})"
        )
    elapsed = time.monotonic() - started
    print(
        f"{args.trials} trials per case and mode, interleaved; {elapsed:.0f} s; load average "
        f"{load_before[0]:.2f} -> {load_after[0]:.2f} (1 min). The machine may be shared: CVs include its noise."
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "trials": args.trials,
                    "target_s": args.target_s,
                    "cases": rows,
                    "summary": summary,
                    "elapsed_s": elapsed,
                    "cores": available_cores(),
                    "loadavg": [load_before, load_after],
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
