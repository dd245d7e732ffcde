#!/usr/bin/env python3
"""Detection rates of `dpbench history`'s change points on synthetic series (seeded).

Series are drawn from validation.noise (NOISE: trial CV, run offset, trials per
commit: swap it there when a new fit of the real noise model changes it, and rerun).
Prints one Markdown table row per scenario (docs/validation/history.md):

- stationary: confirmed changes per 100 series (target <= 1);
- step: one 10% step at a random commit in [10, 40]: found, as the only change, at the right
  commit +-1 (target >= 90%); the mean width of its commit range;
- creep: three 4% steps 5 commits apart at a random start in [8, 30]: exactly one regression,
  its range overlapping the steps and its ratio >= 1.08 (target >= 80%); and, stricter, its
  range covering all three steps.

Usage: python -m validation.simulate_history [--series N] [--seed S] [--commits 50] [--alpha A]
"""

from __future__ import annotations

import argparse
import random
import time

from dpbench.history.changepoints import DEFAULT_ALPHA, DEFAULT_THRESHOLD, find_changes
from validation.noise import NOISE, creep_levels, draw_series, step_levels


def stationary(rng: random.Random, commits: int, alpha: float) -> dict[str, float]:
    return {"changes": len(find_changes(draw_series([0.01] * commits, rng), alpha=alpha).changes)}


def step(rng: random.Random, commits: int, alpha: float) -> dict[str, float]:
    at = rng.randint(10, min(40, commits - 3))
    found = find_changes(draw_series(step_levels(commits, at, 1.10), rng), alpha=alpha).changes
    hit = len(found) == 1 and found[0].direction == "regression" and abs(found[0].first - at) <= 1
    return {"hit": hit, "width": found[0].first_after - found[0].last_before if found else float("nan")}


def creep(rng: random.Random, commits: int, alpha: float) -> dict[str, float]:
    first = rng.randint(8, min(30, commits - 13))
    at = [first, first + 5, first + 10]
    found = find_changes(draw_series(creep_levels(commits, at, 1.04), rng), alpha=alpha).changes
    one = len(found) == 1 and found[0].direction == "regression"
    c = found[0] if one else None
    overlaps = one and c.last_before < at[2] and c.first_after >= at[0] and c.ratio >= 1.08
    covers = one and c.last_before <= at[0] - 1 + 1 and c.first_after >= at[2] - 1
    return {"hit": overlaps, "covers": covers}


def rates(series: int, seed: int, commits: int, alpha: float) -> dict[str, float]:
    rng = random.Random(seed)
    still = [stationary(rng, commits, alpha) for _ in range(series)]
    steps = [step(rng, commits, alpha) for _ in range(series)]
    creeps = [creep(rng, commits, alpha) for _ in range(series)]
    widths = [s["width"] for s in steps if s["width"] == s["width"]]
    return {
        "false_per_100": 100 * sum(s["changes"] for s in still) / series,
        "step_hit": sum(s["hit"] for s in steps) / series,
        "step_width": sum(widths) / len(widths) if widths else float("nan"),
        "creep_hit": sum(c["hit"] for c in creeps) / series,
        "creep_covers": sum(c["covers"] for c in creeps) / series,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=19)
    parser.add_argument("--commits", type=int, default=50)
    parser.add_argument("--alpha", type=float, nargs="*", default=[DEFAULT_ALPHA])
    args = parser.parse_args(argv)
    print(
        f"noise: {NOISE}; threshold {DEFAULT_THRESHOLD:.0%}; {args.commits} commits; {args.series} series per "
        f"scenario; seed {args.seed}"
    )
    print(
        "| alpha | stationary: changes / 100 series | 10% step at commit +-1 | step range width | "
        "creep: one regression | creep: range covers all 3 | seconds |"
    )
    print("|---|---|---|---|---|---|---|")
    for alpha in args.alpha:
        start = time.perf_counter()
        r = rates(args.series, args.seed, args.commits, alpha)
        print(
            f"| {alpha:g} | {r['false_per_100']:.1f} | {r['step_hit']:.1%} | {r['step_width']:.1f} | "
            f"{r['creep_hit']:.1%} | {r['creep_covers']:.1%} | {time.perf_counter() - start:.0f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
