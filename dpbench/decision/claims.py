"""One comparison, one claim: ``faster``, ``slower``, ``level`` or ``unsettled``.

A comparison is a :class:`~dpbench.stats.PairedRatio`: one configuration's throughput over
another's, trial i against trial i, with its interval (:func:`dpbench.stats.hull_interval`). The
claim level (:data:`CLAIM_LEVEL`) is per question: the chance that *any* claim of a question is
false is at most 1 − level, whatever the number of configurations it ranks, because the level is
split over the question's comparisons and the design's looks (Bonferroni,
:func:`comparison_level`): the leader is chosen from the same trials, so only a bound over every
pair of configurations covers the comparisons with it. Its claim:

- ``faster`` / ``slower``: the interval excludes 1 (a difference);
- ``level``: the interval lies inside ±:data:`LEVEL_MARGIN` (an equivalence test, two one-sided
  tests read off the same interval: not merely "no difference found");
- ``unsettled``: neither, or fewer than :data:`~dpbench.stats.MIN_PAIRS` pairs. It says what would
  settle it: the trials the interval needs at the spread seen so far (:func:`trials_to_settle`).

"Not significant" is therefore never said as "no difference": an interval far from 1 with too few
pairs is unsettled, and one that straddles 1 but is wider than the margin is unsettled too.
"""

from __future__ import annotations

import math
import statistics
from enum import Enum

from dpbench.stats import MIN_PAIRS, PairedRatio

__all__ = [
    "CLAIM_LEVEL",
    "LEVEL_MARGIN",
    "MAX_TRIALS_SAID",
    "Claim",
    "claim_of",
    "comparison_level",
    "family_size",
    "trials_to_settle",
]

CLAIM_LEVEL = 0.9
"""The chance that no claim of a question is false (stated once in every view)."""
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


def family_size(configurations: int, *, energy: bool = False) -> int:
    """The comparisons a question's claims are chosen among: every pair of its ``configurations``
    (the leader is any of them), and the leader's energy against the most frugal one's where the
    configurations read the energy counter."""
    return max(configurations * (configurations - 1) // 2, 1) + int(energy)


def comparison_level(level: float = CLAIM_LEVEL, comparisons: int = 1, looks: int = 1) -> float:
    """The coverage each comparison's interval needs so that a question's ``comparisons``, each
    looked at ``looks`` times, make any false claim with probability at most ``1 - level``:
    ``1 - (1 - level) / (comparisons × looks)`` (Bonferroni: it holds whatever the comparisons'
    dependence)."""
    if comparisons < 1 or looks < 1:
        raise ValueError(f"comparisons and looks: expected at least 1, found {comparisons} and {looks}")
    return 1 - (1 - level) / (comparisons * looks)


def claim_of(ratio: PairedRatio, *, margin: float = LEVEL_MARGIN) -> Claim:
    """``ratio`` (this configuration over the other, its interval at the comparison's level) as a
    claim about this configuration."""
    if ratio.pairs < MIN_PAIRS or not (math.isfinite(ratio.lo) and math.isfinite(ratio.hi)):
        return Claim.UNSETTLED
    if ratio.lo > 1:
        return Claim.FASTER
    if ratio.hi < 1:
        return Claim.SLOWER
    if ratio.lo >= 1 / (1 + margin) and ratio.hi <= 1 + margin:
        return Claim.LEVEL
    return Claim.UNSETTLED


def trials_to_settle(ratio: PairedRatio, *, margin: float = LEVEL_MARGIN) -> int | None:
    """About how many pairs would settle an unsettled comparison at its interval's coverage
    (``ratio.confidence``), were the pairs to come as they have: the same mean and spread of the log
    ratios, and the same median. The interval at n pairs is the t-interval of that mean with n − 1
    degrees of freedom, holding the median (:func:`dpbench.stats.hull_interval`); the first n where
    it clears 1 (a difference) or fits inside the margin (level). None where it cannot be told
    (fewer than two pairs, no coverage) or would take more than :data:`MAX_TRIALS_SAID`."""
    from scipy.special import stdtrit  # the t quantile, without scipy.stats' import time

    logs = [math.log(r) for r in ratio.ratios]
    if len(logs) < 2 or not 0 < ratio.confidence < 1:
        return None
    mean, sd, centre = statistics.fmean(logs), statistics.stdev(logs), statistics.median(logs)
    edge = math.log1p(margin)
    for n in range(max(MIN_PAIRS, len(logs) + 1), MAX_TRIALS_SAID + 1):
        half = float(stdtrit(n - 1, 0.5 + ratio.confidence / 2)) * sd / math.sqrt(n)
        lo, hi = min(mean - half, centre), max(mean + half, centre)
        if lo > 0 or hi < 0 or (lo >= -edge and hi <= edge):
            return n
    return None
