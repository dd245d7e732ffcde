"""The statistics every number of dpbench goes through: one implementation each, used by the
trials, the saved ``extra_info``, the report's tables and sentences and the gate (scipy).

Trial times are judged on a log scale: a machine that is 10% slower multiplies every time by
1.1, so intervals and tests on logs are multiplicative and read the same for seconds per step
and for samples per second.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "PairedRatio",
    "coefficient_of_variation",
    "log_t_interval",
    "median",
    "or_none",
    "paired_ratio",
    "percentile",
    "positive",
]


def positive(values: Sequence[float] | None) -> list[float]:
    """The finite, positive numbers of ``values`` (times and ratios; anything else is dropped)."""
    if not isinstance(values, (list, tuple)):
        return []  # a results file can hold anything where a list belongs
    out = []
    for v in values:
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0:
            out.append(float(v))
    return out


def median(values: Sequence[float]) -> float:
    """The median, NaN for no values (a missing number, not an error, in a table)."""
    return statistics.median(values) if len(values) else math.nan


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (``q`` in [0, 100]) of a non-empty list (numpy's default rule)."""
    if not len(values):
        raise ValueError("percentile of an empty list")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def or_none(value: float) -> float | None:
    """NaN (a statistic that needs more values) as None, for JSON written into results files."""
    return None if isinstance(value, float) and math.isnan(value) else value


def coefficient_of_variation(values: Sequence[float]) -> float:
    """Sample standard deviation / mean; NaN with fewer than two values."""
    values = positive(values)
    if len(values) < 2:
        return math.nan
    return statistics.stdev(values) / statistics.fmean(values)


def log_t_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """A ``confidence`` interval of the centre of positive ``values``: a t-interval of their
    logs, exp'd back (NaNs with fewer than two values)."""
    # scipy.special, not scipy.stats: the same quantile, without the ~0.7 s import of scipy.stats
    # that the report and the gate would pay for this one function.
    from scipy.special import stdtrit

    logs = [math.log(v) for v in positive(values)]
    if len(logs) < 2:
        return math.nan, math.nan
    mean = statistics.fmean(logs)
    half = float(stdtrit(len(logs) - 1, 0.5 + confidence / 2)) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean - half), math.exp(mean + half)


@dataclass(frozen=True, kw_only=True)
class PairedRatio:
    """``numerator / denominator`` from trials paired by index: the geometric mean of the
    per-pair ratios and its 95% t-interval (NaN with fewer than two pairs)."""

    ratio: float
    lo: float
    hi: float
    pairs: int
    ratios: tuple[float, ...] = ()  # the per-pair ratios behind it

    @property
    def interval(self) -> list[float] | None:
        """``[lo, hi]``, or None when unknown (as saved in results files)."""
        return None if math.isnan(self.lo) else [self.lo, self.hi]

    def inverse(self) -> PairedRatio:
        """``denominator / numerator``: the same pairs, each ratio inverted."""
        return PairedRatio(
            ratio=1 / self.ratio,
            lo=1 / self.hi,
            hi=1 / self.lo,
            pairs=self.pairs,
            ratios=tuple(1 / r for r in self.ratios),
        )

    def scaled(self, factor: float) -> PairedRatio:
        return PairedRatio(
            ratio=self.ratio * factor,
            lo=self.lo * factor,
            hi=self.hi * factor,
            pairs=self.pairs,
            ratios=tuple(r * factor for r in self.ratios),
        )

    @property
    def significant(self) -> bool:
        """The interval excludes 1 (False when it is unknown)."""
        return self.pairs >= 2 and (self.lo > 1 or self.hi < 1)


def paired_ratio(numerator: Sequence[float], denominator: Sequence[float]) -> PairedRatio:
    """Trial i of one case against trial i of another: interleaved trials ran close in time, so
    pairing cancels what the machine did between passes. Extra trials on one side are unpaired
    and left out."""
    ratios = positive(
        [
            a / b
            for a, b in zip(numerator, denominator)
            if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > 0
        ]
    )
    if not ratios:
        return PairedRatio(ratio=math.nan, lo=math.nan, hi=math.nan, pairs=0)
    centre = math.exp(statistics.fmean(math.log(r) for r in ratios))
    lo, hi = log_t_interval(ratios)
    return PairedRatio(ratio=centre, lo=lo, hi=hi, pairs=len(ratios), ratios=tuple(ratios))
