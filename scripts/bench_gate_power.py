#!/usr/bin/env python
"""How often the regression gate cries wolf, and how often it catches a real slowdown.

Synthetic runs through the real code path (pytest-benchmark documents → ``runs_frame`` →
``compare_frames``): 15 benchmarks; each trial (fresh processes) of each benchmark gets a
lognormal process factor with CV ``c``; each of its rounds 3% lognormal noise on top; each
trial's control 1% noise (``--shared-control``: the control also carries the trial's process
factor, the worst case for the control rule). Two layouts per side: ``n`` files of one trial
each (pooled by the gate) and one file of ``n`` trials.

- false alarms: runs with at least one ``regressed`` benchmark when nothing changed;
- detections: runs where the one benchmark made 40% slower is ``regressed``.

Also shown, computed here on the same pooled trials (not a gate option): a one-sided
Mann-Whitney U test of the candidate's trials against the baseline's × (1 + threshold), the
alternative the gate could have used.

    .venv/bin/python scripts/bench_gate_power.py               # the full table (200 seeds)
    .venv/bin/python scripts/bench_gate_power.py --seeds 20 --cv 8 --trials 6
"""
from __future__ import annotations

import argparse
import math
import sys
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from dpbench.gate.compare import DEFAULT_ALPHA, Verdict, compare_frames, pool_side
from dpbench.results.frame import runs_frame
from dpbench.results.load import Run

BENCHMARKS = 15
ROUNDS = 5
ROUND_NOISE = 0.03
CONTROL_NOISE = 0.01
CONTROL_S = 0.004
SLOWDOWN = 1.40
SLOWED = 7  # the benchmark made slower in the detection runs
THRESHOLD = 0.10
MACHINE = {"node": "synthetic", "cpu": {"brand_raw": "synthetic"}, "gpu_count": 0, "torch": "2.13.0"}


def sigma(cv: float) -> float:
    """The log-space sigma of a lognormal with coefficient of variation ``cv``."""
    return math.sqrt(math.log(1 + cv**2))


def draw_side(rng: np.random.Generator, *, trials: int, cv: float, shared_control: bool) -> dict[str, np.ndarray]:
    """Per benchmark and trial: the rounds, and the control. Shapes (B, T, R) and (B, T)."""
    base = 0.01 * (1 + np.arange(BENCHMARKS))[:, None, None]  # 10 ms … 150 ms per step
    factor = np.exp(rng.normal(0, sigma(cv), (BENCHMARKS, trials, 1)))
    rounds = base * factor * np.exp(rng.normal(0, sigma(ROUND_NOISE), (BENCHMARKS, trials, ROUNDS)))
    control = CONTROL_S * np.exp(rng.normal(0, CONTROL_NOISE, (BENCHMARKS, trials)))
    if shared_control:
        control = control * factor[:, :, 0]
    return {"rounds": rounds, "control": control}


def _benchmark(b: int, rounds: np.ndarray, control: np.ndarray) -> dict:
    """One schema-2 benchmark of ``rounds`` (T, R) seconds per step and ``control`` (T,)."""
    medians = np.median(rounds, axis=1)
    data = rounds.ravel().tolist()
    name = f"test_gate[b{b:02d}]"
    extra = {"schema": 2, "kind": "training", "suite": "gate", "strategy": "ddp", "workload": "synthetic",
             "world_size": 2, "global_batch": 64, "steps_per_round": 4, "case_key": name,
             "step_time_s": float(np.median(medians)),
             "trials": {"count": len(medians), "rounds_per_trial": rounds.shape[1],
                        "step_time_s": medians.tolist(), "control_s": control.tolist()}}
    return {"name": name, "fullname": f"suites/test_gate.py::{name}", "extra_info": extra,
            "stats": {"median": float(np.median(data)), "rounds": len(data), "data": data}}


def runs_of(side: dict[str, np.ndarray], label: str, *, one_file: bool, slow: bool = False) -> list[Run]:
    rounds = side["rounds"].copy()
    if slow:
        rounds[SLOWED] *= SLOWDOWN
    trials = rounds.shape[1]
    files = [range(trials)] if one_file else [[t] for t in range(trials)]
    out = []
    for i, chosen in enumerate(files):
        chosen = list(chosen)
        benchmarks = [_benchmark(b, rounds[b, chosen], side["control"][b, chosen]) for b in range(BENCHMARKS)]
        out.append(Run(path=Path(f"/synthetic/machine/{i + 1:04d}_{label}.json"), machine_info=MACHINE,
                       commit_info={}, datetime="2026-01-01T00:00:00", version="5.3.1", benchmarks=benchmarks))
    return out


def mann_whitney_regressions(base, cand, alpha: float) -> set[str]:
    """What-if: Mann-Whitney U on the pooled trials, shifted by the threshold, with the gate's
    effect-size rule (ratio of medians beyond the threshold)."""
    from scipy import stats

    b, c = pool_side(base, "baseline"), pool_side(cand, "candidate")
    out = set()
    for name in b:
        x, y = c[name].times, b[name].times
        if np.median(x) / np.median(y) > 1 + THRESHOLD:
            p = stats.mannwhitneyu(x, [v * (1 + THRESHOLD) for v in y], alternative="greater").pvalue
            if p < alpha:
                out.add(name)
    return out


def one_seed(seed: int, *, cv: float, trials: int, one_file: bool, shared_control: bool,
             alpha: float) -> dict[str, int]:
    rng = np.random.default_rng(seed)
    base_side = draw_side(rng, trials=trials, cv=cv, shared_control=shared_control)
    cand_side = draw_side(rng, trials=trials, cv=cv, shared_control=shared_control)
    base = runs_frame(runs_of(base_side, "base", one_file=one_file))
    same = runs_frame(runs_of(cand_side, "cand", one_file=one_file))
    slow = runs_frame(runs_of(cand_side, "slow", one_file=one_file, slow=True))
    null = compare_frames(base, same, threshold=THRESHOLD, alpha=alpha)
    hit = compare_frames(base, slow, threshold=THRESHOLD, alpha=alpha)
    slowed = f"suites/test_gate.py::test_gate[b{SLOWED:02d}]"
    verdict = {b.name: b.verdict for b in hit.benchmarks}[slowed]
    return {"false_alarm": int(bool(null.regressions)), "detected": int(verdict == Verdict.REGRESSED),
            "inconclusive": int(verdict == Verdict.INCONCLUSIVE),
            "mw_false_alarm": int(bool(mann_whitney_regressions(base, same, alpha))),
            "mw_detected": int(slowed in mann_whitney_regressions(base, slow, alpha))}


def _chunk(args: tuple) -> dict[str, int]:
    seeds, kwargs = args
    totals: dict[str, int] = {}
    for seed in seeds:
        for key, value in one_seed(seed, **kwargs).items():
            totals[key] = totals.get(key, 0) + value
    return totals


def study(pool: ProcessPoolExecutor, *, seeds: int, **kwargs) -> dict[str, int]:
    """Totals over ``seeds`` seeds, split across the pool's processes."""
    chunks = [(range(start, min(seeds, start + 25)), kwargs) for start in range(0, seeds, 25)]
    totals: dict[str, int] = {}
    for part in pool.map(_chunk, chunks):
        for key, value in part.items():
            totals[key] = totals.get(key, 0) + value
    return totals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--cv", type=float, nargs="+", default=[3, 5, 8, 12], help="process-to-process CV, in %%")
    parser.add_argument("--trials", type=int, nargs="+", default=[3, 4, 6, 10], help="trials per side")
    parser.add_argument("--shared-control", action="store_true",
                        help="the control carries each trial's process factor too")
    parser.add_argument("--alpha", type=float, default=DEFAULT_ALPHA, help="the gate's alpha (default: its default)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes (default: all cores)")
    args = parser.parse_args(argv)
    n = args.seeds
    print(f"{BENCHMARKS} benchmarks, {ROUNDS} rounds per trial with {ROUND_NOISE:.0%} noise, threshold "
          f"{THRESHOLD:.0%}, alpha {args.alpha:g}, {SLOWDOWN - 1:.0%} slowdown of one benchmark, {n} seeds per cell; "
          f"controls {'share' if args.shared_control else 'do not share'} the process factor")
    header = ("| CV | trials/side | false alarms (n files × 1 trial) | 40% caught (n files × 1 trial) "
              "| false alarms (1 file × n trials) | 40% caught (1 file × n trials) | inconclusive instead "
              "| Mann-Whitney on trials: false alarms | Mann-Whitney: caught |")
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for cv in args.cv:
            for trials in args.trials:
                started = time.perf_counter()
                cell = {"cv": cv / 100, "trials": trials, "shared_control": args.shared_control, "alpha": args.alpha}
                files = study(pool, seeds=n, one_file=False, **cell)
                one = study(pool, seeds=n, one_file=True, **cell)
                print(f"| {cv:g}% | {trials} | {files['false_alarm']}/{n} | {files['detected']}/{n} "
                      f"| {one['false_alarm']}/{n} | {one['detected']}/{n} | {one['inconclusive']}/{n} "
                      f"| {one['mw_false_alarm']}/{n} | {one['mw_detected']}/{n} |", flush=True)
                print(f"  ({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
