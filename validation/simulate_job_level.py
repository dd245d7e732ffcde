#!/usr/bin/env python
"""Simulate a level per job: A/A and one-gap jobs judged by a t-interval on the log paired ratios of
every pair of configurations at the job's level split over its pairs (Bonferroni), and how often a
job then claims falsely, or finds the gap. Seeded: the same arguments print the same numbers.

    python -m validation.simulate_job_level [--model quick-runs] [--jobs 1000] [--configs 4,8,16]
                                            [--trials 5,8] [--gaps 0,0.2] [--level 0.9]

A candidate for issue 64's per-job level, not what the decision uses: the decision's sign-test
intervals hold their level per comparison, and a job of K configurations compares up to
K(K - 1)/2 pairs (the leader is chosen from the same trials, so only a bound over every pair covers
the comparisons with it). The sign test cannot reach a per-job level in few trials whatever the
difference (its smallest error at n pairs is 2/2^n: docs/validation/decision.md, "What a level per
job would cost"); an interval that uses the sizes of the differences can.

One job: C configurations whose trials are drawn from the gate's fitted noise model
(validation.noise, as ``validation.simulate_contention`` draws them, no neighbour), the second
``gap`` faster than the others, which tie. Every pair is judged on its first n paired trials: the
t-interval of the mean log ratio at 1 - (1 - level)/pairs; a claim where it excludes 0. A false
claim is a claim between two tied configurations. What this does not cover: the sequential design's
looks (each look is one more chance to miss), "level" claims, and a busy neighbour.
"""

from __future__ import annotations

import argparse
import math
import random
from collections.abc import Sequence

from scipy import stats

from validation.contention import ContentionModel
from validation.noise import MODELS
from validation.simulate_contention import draw_job


def t_claims(throughputs: Sequence[float], others: Sequence[float], alpha: float) -> bool:
    """Whether the t-interval of the mean of log(throughputs[i] / others[i]) at two-sided error
    ``alpha`` excludes 0 (a claim: one side is faster). False with fewer than two pairs."""
    logs = [math.log(a / b) for a, b in zip(throughputs, others)]
    n = len(logs)
    if n < 2:
        return False
    mean = sum(logs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
    half = stats.t.ppf(1 - alpha / 2, n - 1) * sd / math.sqrt(n)
    return mean - half > 0 or mean + half < 0


def run_cell(model, *, configs: int, gap: float, trials: Sequence[int], jobs: int, level: float, seed: int):
    """Per trial count: the jobs with a false claim and the jobs that claimed the gap."""
    rng = random.Random(seed)
    quiet = ContentionModel(found=(), rate=0.0)
    pairs = configs * (configs - 1) // 2
    alpha = (1 - level) / pairs
    out = {n: [0, 0] for n in trials}
    for _ in range(jobs):
        truth, times, _ = draw_job(model, quiet, rng, configs=configs, gap=gap, trials=max(trials))
        for n in trials:
            rates = [[1 / t for t in series[:n]] for series in times]
            wrong = found = False
            for a in range(configs):
                for b in range(a + 1, configs):
                    if t_claims(rates[a], rates[b], alpha):
                        wrong |= truth[a] == truth[b]
                        found |= truth[a] != truth[b]
            out[n][0] += wrong
            out[n][1] += found
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted(MODELS), default="quick-runs")
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--configs", default="4,8,16")
    p.add_argument("--trials", default="5,8")
    p.add_argument("--gaps", default="0,0.2")
    p.add_argument("--level", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    trials = [int(n) for n in args.trials.split(",")]
    model = MODELS[args.model]
    print(f"model {args.model} ({model.source}); {args.jobs} jobs a cell; level {args.level:.0%} per job")
    heads = " | ".join(f"{n} trials: false / gap claimed" for n in trials)
    print(f"| configurations | pairs | true gap | {heads} |")
    print("|---|---|---|" + "---|" * len(trials))
    for gap in (float(g) for g in args.gaps.split(",")):
        for configs in (int(c) for c in args.configs.split(",")):
            cell = run_cell(
                model, configs=configs, gap=gap, trials=trials, jobs=args.jobs, level=args.level, seed=args.seed
            )
            cols = " | ".join(
                f"{cell[n][0] / args.jobs:.1%} / " + (f"{cell[n][1] / args.jobs:.1%}" if gap else "—") for n in trials
            )
            print(f"| {configs} | {configs * (configs - 1) // 2} | {'A/A' if not gap else f'{gap:.0%}'} | {cols} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
