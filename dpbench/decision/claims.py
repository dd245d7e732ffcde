"""One comparison, one claim: ``faster``, ``slower``, ``level`` or ``unsettled``.

A comparison is a :class:`~dpbench.stats.PairedRatio`: one configuration's throughput over
another's, trial i against trial i, with its distribution-free interval at the claim level
(:data:`CLAIM_LEVEL`, the same for every claim dpbench makes). Its claim:

- ``faster`` / ``slower``: the interval excludes 1 (a difference, at the claim level);
- ``level``: the interval lies inside ±:data:`LEVEL_MARGIN` (an equivalence test, two one-sided
  tests read off the same interval: not merely "no difference found");
- ``unsettled``: neither, or too few pairs for an interval at the claim level. It says what would
  settle it: the trials the interval needs at the spread seen so far (:func:`trials_to_settle`).

"Not significant" is therefore never said as "no difference": an interval far from 1 with too few
pairs is unsettled, and one that straddles 1 but is wider than the margin is unsettled too.
"""

from __future__ import annotations

import math
import statistics
from enum import Enum

from dpbench.stats import MIN_CLAIM_CONFIDENCE, PairedRatio

__all__ = ["CLAIM_LEVEL", "LEVEL_MARGIN", "MAX_TRIALS_SAID", "Claim", "claim_of", "min_pairs", "trials_to_settle"]

CLAIM_LEVEL = MIN_CLAIM_CONFIDENCE
"""The interval's coverage every claim needs (stated once in every view)."""
LEVEL_MARGIN = 0.05
"""Two configurations are level when their ratio's interval lies inside [1/1.05, 1.05]: a 5%
difference in step time is below what a strategy choice should turn on. Level is reachable in a
handful of trials only where paired trials agree to within a few %; on the 2-core development VM
they spread by about 20% (sd of the log paired ratio), and level is out of reach there
(docs/validation/decision.md, "The candidate's level claims")."""
MAX_TRIALS_SAID = 64
"""Beyond this many trials "would settle it" is said as "many": the difference sits on the margin."""


class Claim(str, Enum):
    """What one comparison supports (a saved identifier: the JSON and the tests read it)."""

    FASTER = "faster"
    SLOWER = "slower"
    LEVEL = "level"
    UNSETTLED = "unsettled"


def min_pairs(level: float = CLAIM_LEVEL) -> int:
    """The fewest pairs whose [min, max] interval of the median covers ``level`` (5 at 90%)."""
    return next(n for n in range(2, 64) if 1 - 2 * 0.5**n >= level)


def claim_of(ratio: PairedRatio, *, margin: float = LEVEL_MARGIN, level: float = CLAIM_LEVEL) -> Claim:
    """``ratio`` (this configuration over the other) as a claim about this configuration."""
    if ratio.pairs < 2 or not ratio.confidence >= level or not (math.isfinite(ratio.lo) and math.isfinite(ratio.hi)):
        return Claim.UNSETTLED
    if ratio.lo > 1:
        return Claim.FASTER
    if ratio.hi < 1:
        return Claim.SLOWER
    if ratio.lo >= 1 / (1 + margin) and ratio.hi <= 1 + margin:
        return Claim.LEVEL
    return Claim.UNSETTLED


def _order_index(n: int, level: float) -> int:
    """The k of :func:`dpbench.stats.median_interval`'s interval [x(k+1), x(n-k)] at ``n`` pairs."""
    from scipy.special import bdtr  # the binomial CDF, without scipy.stats' import time

    k = 0
    while k + 1 <= (n - 1) // 2 and 1 - 2 * float(bdtr(k + 1, n, 0.5)) >= level:
        k += 1
    return k


def trials_to_settle(ratio: PairedRatio, *, margin: float = LEVEL_MARGIN, level: float = CLAIM_LEVEL) -> int | None:
    """About how many pairs would settle an unsettled comparison, at the centre and spread its pairs
    show: the interval's ends are order statistics [x(k+1), x(n-k)], which for log ratios spread
    normally sit near the centre ± σ Φ⁻¹(1 − (k+1)/(n+1)); the first n where that interval clears 1
    (a difference) or fits inside the margin (level). None where it cannot be told (fewer than two
    pairs) or would take more than :data:`MAX_TRIALS_SAID`."""
    from scipy.special import ndtri  # the normal quantile, without scipy.stats' import time

    logs = [math.log(r) for r in ratio.ratios]
    if len(logs) < 2:
        return None
    centre = statistics.median(logs)
    # The robust sd of the pairs' log ratios (1.4826 × MAD): a disturbed pair does not inflate it.
    sd = 1.4826 * statistics.median(abs(x - centre) for x in logs)
    edge = math.log1p(margin)
    for n in range(max(min_pairs(level), len(logs) + 1), MAX_TRIALS_SAID + 1):
        k = _order_index(n, level)
        if 1 - 2 * 0.5**n < level:
            continue
        half = sd * float(ndtri(1 - (k + 1) / (n + 1)))
        lo, hi = centre - half, centre + half
        if lo > 0 or hi < 0 or (lo >= -edge and hi <= edge):
            return n
    return None
