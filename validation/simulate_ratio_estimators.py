#!/usr/bin/env python
"""Why "× single" is the median of the paired ratios: simulated pairs of trials, the first estimator
(geometric mean, 95% t-interval on the logs) against the median with the sign test's
distribution-free interval at 90% (what dpbench used next) and the median with the current
interval at 90% (the t-interval widened to hold the median: dpbench.stats.paired_ratio). Seeded:
the same arguments print the same numbers (each estimator's rows as before the next was added).

    python -m validation.simulate_ratio_estimators [--pairs 5] [--sd 0.2] [--reps 20000]

Per estimator: how often a claim is made when the true ratio is 1 (false claims), how often when it
is exp(2 sd) (power), the interval's coverage, and with one pair in the job disturbed 15× (a busy
machine during one trial of the denominator, undetected): how far the centre moved and how often
the interval spans more than a factor of 3.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics

from dpbench.stats import log_t_interval, paired_ratio


def _old(ratios: list[float]) -> tuple[float, float, float, bool]:
    centre = math.exp(statistics.fmean(math.log(r) for r in ratios))
    lo, hi = log_t_interval(ratios)
    return centre, lo, hi, lo > 1 or hi < 1


SIGN_LEVEL = 0.9
"""The claim level the sign-test interval was asked for (per comparison)."""


def _sign(ratios: list[float]) -> tuple[float, float, float, bool]:
    """The median and its order-statistic interval [x(k+1), x(n-k)], k the largest whose coverage
    1 - 2 P(Bin(n, 1/2) <= k) reaches 90% ([min, max] below that, claiming nothing)."""
    from scipy.special import bdtr

    ordered, n = sorted(ratios), len(ratios)
    k = 0
    while k + 1 <= (n - 1) // 2 and 1 - 2 * float(bdtr(k + 1, n, 0.5)) >= SIGN_LEVEL:
        k += 1
    lo, hi = ordered[k], ordered[n - 1 - k]
    claim = 1 - 2 * float(bdtr(k, n, 0.5)) >= SIGN_LEVEL and (lo > 1 or hi < 1)
    return statistics.median(ratios), lo, hi, claim


def _hull(ratios: list[float]) -> tuple[float, float, float, bool]:
    r = paired_ratio(ratios, [1.0] * len(ratios), SIGN_LEVEL)
    return r.ratio, r.lo, r.hi, r.excludes_one


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--sd", type=float, default=0.2, help="log sd of one paired ratio (0.2: this 2-core machine)")
    p.add_argument("--reps", type=int, default=20000)
    p.add_argument("--wild", type=float, default=15.0, help="factor on one pair in the disturbed jobs")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    rng = random.Random(a.seed)
    print(f"{a.pairs} pairs, log sd {a.sd} per pair, {a.reps} jobs per row, one wild pair = {a.wild}x, seed {a.seed}")
    print("estimator  false claims  power at exp(2sd)  coverage  | one wild pair: median centre  intervals > 3x")
    for name, fn in (("GM + t", _old), ("median+sign", _sign), ("median+hull", _hull)):
        false = power = covered = 0
        centres, wide = [], 0
        for _ in range(a.reps):
            null = [math.exp(rng.gauss(0, a.sd)) for _ in range(a.pairs)]
            c, lo, hi, claim = fn(null)
            false += claim
            covered += lo <= 1 <= hi
            shifted = [r * math.exp(2 * a.sd) for r in null]
            power += fn(shifted)[3] and fn(shifted)[0] > 1
            wild = list(null)
            wild[rng.randrange(a.pairs)] *= a.wild
            c, lo, hi, _ = fn(wild)
            centres.append(c)
            wide += hi / lo > 3
        print(
            f"{name:<11} {false / a.reps:>11.1%}  {power / a.reps:>17.1%}  {covered / a.reps:>8.1%}  "
            f"| {statistics.median(centres):>27.2f}  {wide / a.reps:>14.1%}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
