#!/usr/bin/env python
"""How few paired trials any test needs to settle a gap, under a fitted noise model: the floor
under "trials used" that no stopping rule can go below. Exact (no simulation): closed-form power.

    python -m validation.sequential_power_floor [--model quick-runs|history-runs|clean] [--gaps 0.2,0.5]
                                               [--max-pairs 12]

Per number of pairs n and true gap g (one configuration 1 + g times as fast), the probability that
one look at n pairs claims ``faster`` at the claim level (two-sided 90%: one side's 5%):

- the sign test's order-statistic interval, which the decision used before the t-interval
  (distribution-free: no claim at all below 5 pairs, where 2 · 2⁻ⁿ > 10%);
- Student's t on the log ratios, which it uses now (parametric: assumes normal log ratios);
- a z-test with the noise's spread known (no test of the pairs alone can do better).

The pairs' log ratios are drawn as the model draws them: each configuration its own trial spread
(``trial_sd``), so a pair's log ratio has spread √2 · trial_sd; the run's offset cancels in the pair.
"""

from __future__ import annotations

import argparse
import math

from scipy.stats import binom, nct, norm, t

from dpbench.decision.claims import CLAIM_LEVEL
from validation.noise import MODELS


def sign_power(n: int, d: float, sd: float, alpha: float) -> float:
    """P(the sign-test interval of n pairs lies above 0) when each pair is above with Φ(d / sd)."""
    # the largest k with the interval [x(k+1), x(n−k)] at the level: 2 · P(Bin(n, ½) ≤ k) ≤ alpha
    ks = [k for k in range(n) if 2 * binom.cdf(k, n, 0.5) <= alpha]
    if not ks:
        return 0.0
    below = 1 - norm.cdf(d / sd)  # a pair on the wrong side
    return float(binom.cdf(max(ks), n, below))  # at most k pairs below: the interval excludes 0


def t_power(n: int, d: float, sd: float, alpha: float) -> float:
    """P(Student's one-sided t at alpha / 2 claims) for n pairs."""
    if n < 2:
        return 0.0
    return float(1 - nct.cdf(t.ppf(1 - alpha / 2, n - 1), n - 1, d * math.sqrt(n) / sd))


def z_power(n: int, d: float, sd: float, alpha: float) -> float:
    """P(a z-test with the spread known claims) for n pairs: the most any test of the pairs can do."""
    return float(norm.cdf(d * math.sqrt(n) / sd - norm.ppf(1 - alpha / 2)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="quick-runs", choices=("quick-runs", "history-runs", "clean"))
    parser.add_argument("--gaps", default="0.2,0.5")
    parser.add_argument("--max-pairs", type=int, default=12)
    args = parser.parse_args(argv)
    model = MODELS[args.model]
    sd = math.sqrt(2) * model.trial_sd
    alpha = 1 - CLAIM_LEVEL
    print(f"noise model {args.model}: trial sd {model.trial_sd:.3f}, a pair's log ratio sd {sd:.3f}")
    print(f"claim level {CLAIM_LEVEL:.0%} two-sided; power of one look at n pairs")
    for gap in (float(g) for g in args.gaps.split(",")):
        d = math.log1p(gap)
        print(f"\ngap {gap:.0%}\n{'pairs':>5} {'sign':>6} {'t':>6} {'z (sd known)':>13}")
        for n in range(2, args.max_pairs + 1):
            print(
                f"{n:>5} {sign_power(n, d, sd, alpha):>6.2f} {t_power(n, d, sd, alpha):>6.2f} "
                f"{z_power(n, d, sd, alpha):>13.2f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
