"""Where a benchmark's level changes over its history, confirmed trial by trial.

A series is one list of trial times per point (a commit, its runs pooled), in commit order.
Finding a change is two steps, as in Apache Otava and MongoDB's CI (E-Divisive, then a test):

1. **Candidates**: binary segmentation (squared-error cost, written here: see
   :func:`_candidates` for why not ``ruptures``) of the per-point mean log time, with a
   deliberately low penalty so that real changes are rarely missed here; segments are at least
   :data:`MIN_SEGMENT` points long (PyTorch's HUD: a change
   only after two points in a row), so one odd run never makes a change on its own.
2. **Confirmation**: every boundary is tested between the two segments next to it with the
   history's own test, Welch's t on log trial times (``scipy.stats.ttest_ind_from_stats``; the gate's
   is another: a moderated test with a between-run term, for two sides of many trials), each side's
   standard error floored at the series' commit-to-commit scatter / sqrt(points): trials of one
   run share that run's offset, so their own spread understates how far two segments' means
   wander (the same reason the gate floors each side's sd at the run's typical spread). The
   least significant boundary with p >= ``alpha`` is merged away and the rest re-tested, until
   every boundary left has p < ``alpha``. The p is selection-biased (the segmentation chose the boundary),
   so ``alpha`` is not a false-alarm rate by itself: :data:`DEFAULT_ALPHA` was chosen by
   simulation (``python -m validation.simulate_history``, docs/validation/history.md) to
   keep stationary 50-point series at <= 1 confirmed change per 100 series; a longer series uses
   ``alpha x 50 / points`` (it tests that many more positions).

A confirmed change beyond the threshold is reported alone; consecutive confirmed changes below
it in one direction accumulate, and once their product crosses the threshold they are reported
as one change over their whole commit range (creep: three 4% steps are one 12% regression). Two
neighbours stay apart only when each is beyond the threshold *significantly* (one-sided Welch's t
against the threshold, p < :data:`APART_ALPHA`): a creep step that merely looks like 6% in a noisy
segment does not split the creep (it split about one creep in four at a 5% trial CV), while two real 10%
regressions a few commits apart are still reported one by one.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from dpbench.stats import Threshold, log_t_interval, median

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_THRESHOLD",
    "MIN_POINTS",
    "MIN_SEGMENT",
    "Change",
    "Direction",
    "Segment",
    "SeriesChanges",
    "Step",
    "find_changes",
    "segments_of",
]

DEFAULT_THRESHOLD = 0.05  # the smallest change reported (the GPU workflow's --threshold)
DEFAULT_ALPHA = 1e-4  # a reported change; chosen by simulation: see the module docstring
# How much worse (in units of the per-point variance) a split may fit and still be in a change's
# range; 9 = a 3-sigma likelihood-ratio set. Chosen by simulation (python -m validation.simulate_history).
LOCATION_SLACK = 9.0
# Neighbouring same-direction steps are one creep unless both are this significantly beyond the
# threshold (see the module docstring); a decision between two reports, not a claim of a change.
APART_ALPHA = 0.05
# alpha holds for series of this many points; a longer series tests proportionally more
# candidate positions, so its alpha shrinks in proportion (Bonferroni over positions).
REFERENCE_POINTS = 50
MIN_POINTS = 4  # fewer points: the series is shown, no change is claimed
MIN_SEGMENT = 2  # points in a row before a level counts
# The segmentation's penalty per boundary in units of the per-point variance: low on purpose (about 2 log n
# is BIC's), the confirmation removes what it lets through.
PENALTY_PER_LOG_N = 1.0


class Direction:
    """Saved identifiers of ``--json``: the strings never change."""

    REGRESSION = "regression"
    IMPROVEMENT = "improvement"


@dataclass(frozen=True, kw_only=True)
class Segment:
    """Points ``start`` … ``stop - 1`` of a series, at one level."""

    start: int
    stop: int
    median_s: float  # median of the pooled trial times
    lo_s: float  # 95% interval of the level, from the per-point medians (between-run scatter included)
    hi_s: float
    trials: tuple[float, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Step:
    """A confirmed boundary: the level changes between points ``index - 1`` and ``index``."""

    index: int
    ratio: float  # after / before (medians of the adjacent segments)
    p: float


@dataclass(frozen=True, kw_only=True)
class Change:
    """A reported change: ``first`` is the point after its (largest) step, ``last_before`` the
    last point at the old level and ``first_after`` the first at the new one; a creep spans
    several steps (``len(steps) > 1``) and its range all of them."""

    first: int
    last_before: int
    first_after: int
    before: Segment
    after: Segment
    ratio: float
    p: float
    direction: str
    steps: tuple[int, ...] = field(default=())


# ---------------------------------------------------------------- the test
class _Sums:
    """Per-point count, sum and sum of squares of log trial times, cumulated: any segment's
    mean and sd of log trials in O(1) (a 500-commit series is tested thousands of times)."""

    def __init__(self, points: Sequence[Sequence[float]]):
        self.n, self.s, self.q = [0], [0.0], [0.0]
        self.means = []
        for p in points:
            logs = [math.log(v) for v in p]
            self.n.append(self.n[-1] + len(logs))
            self.s.append(self.s[-1] + sum(logs))
            self.q.append(self.q[-1] + sum(x * x for x in logs))
            self.means.append(sum(logs) / len(logs))

    def side(self, start: int, stop: int, floor: float) -> tuple[float, float, int]:
        """(mean log, sd given to the t-test, trial count) of points start … stop - 1, floored."""
        n = self.n[stop] - self.n[start]
        total, squares = self.s[stop] - self.s[start], self.q[stop] - self.q[start]
        mean = total / n
        var = max(squares - n * mean * mean, 0.0) / (n - 1) if n > 1 else 0.0
        # Floor the standard error at scatter / sqrt(points): sd^2 / n >= floor^2 / k.
        sd = max(math.sqrt(var), floor * math.sqrt(n / (stop - start)))
        return mean, sd, n


def commit_scatter(means: Sequence[float]) -> float:
    """The sd of one point's mean log time, robust to level changes: from the median absolute
    difference of consecutive points (a step moves one difference, not the median)."""
    diffs = sorted(abs(b - a) for a, b in zip(means, means[1:]))
    if not diffs:
        return 0.0
    # |N(0, 2 s^2)| has median 0.6745 * sqrt(2) * s.
    return median(diffs) / (0.6745 * math.sqrt(2))


def _within(sums: _Sums) -> float:
    """The sd of a point's mean log time from its own trials: pooled within-point variance / trials
    (from the per-point sums: ``statistics.variance`` works in fractions, far too slow here)."""
    squares, df = 0.0, 0
    for i in range(len(sums.means)):
        n = sums.n[i + 1] - sums.n[i]
        if n > 1:
            squares += max((sums.q[i + 1] - sums.q[i]) - n * sums.means[i] ** 2, 0.0)
            df += n - 1
    points = len(sums.means)
    return math.sqrt(squares / df / (sums.n[-1] / points)) if df else 0.0


def welch_p(sums: _Sums, before: tuple[int, int], after: tuple[int, int], floor: float) -> float:
    """Two-sided p of Welch's t (history's test, not the gate's) on the log trial times of two segments, each
    side's sd floored (see the module docstring); NaN where no test is possible."""
    from scipy import stats

    m1, s1, n1 = sums.side(*before, floor)
    m2, s2, n2 = sums.side(*after, floor)
    if n1 < 2 or n2 < 2:
        return math.nan
    if s1 == 0 and s2 == 0:
        return 1.0 if m1 == m2 else 0.0
    return float(stats.ttest_ind_from_stats(m1, s1, n1, m2, s2, n2, equal_var=False).pvalue)


# ---------------------------------------------------------------- segmentation
def _best_split(prefix, squares, start: int, stop: int) -> tuple[int, float]:
    """The split of points start … stop - 1 that most reduces the squared error of a
    one-level fit (each side >= MIN_SEGMENT points), and that reduction."""
    import numpy as np

    cut = np.arange(start + MIN_SEGMENT, stop - MIN_SEGMENT + 1)
    if not len(cut):
        return -1, 0.0
    left_n, right_n = cut - start, stop - cut
    left, right = prefix[cut] - prefix[start], prefix[stop] - prefix[cut]
    total = prefix[stop] - prefix[start]
    gain = left**2 / left_n + right**2 / right_n - total**2 / (stop - start)
    best = int(np.argmax(gain))
    return int(cut[best]), float(gain[best])


def _candidates(means: Sequence[float], scatter: float) -> list[int]:
    """Binary segmentation of the per-point mean log times (squared-error cost, the boundaries
    as indices of the first points of new segments).

    Written here rather than taken from ``ruptures``: its PELT and Binseg compute every
    segment's cost with ``numpy.var`` (no cumulative sums), far too slow at 500 points x 70
    benchmarks, and is slow to import (measurements: docs/calibration.md#change-point-search). With
    cumulative sums one split search is one vectorised pass."""
    import numpy as np

    if len(means) < 2 * MIN_SEGMENT or scatter <= 0:
        return []
    values = np.asarray(means, dtype=float)
    prefix = np.concatenate([[0.0], np.cumsum(values)])
    penalty = PENALTY_PER_LOG_N * scatter**2 * math.log(len(means))
    bounds, todo = [], [(0, len(means))]
    while todo:
        start, stop = todo.pop()
        cut, gain = _best_split(prefix, None, start, stop)
        if cut < 0 or gain <= penalty:
            continue
        bounds.append(cut)
        todo += [(start, cut), (cut, stop)]
    return sorted(bounds)


def _prune(sums: _Sums, total: int, bounds: list[int], floor: float, alpha: float) -> list[tuple[int, float]]:
    """Merge the least significant boundary until every boundary left has p < alpha; only the
    two boundaries next to a merged one are re-tested."""
    bounds = list(bounds)

    def p_at(i: int) -> float:
        edges = (bounds[i - 1] if i else 0, bounds[i], bounds[i + 1] if i + 1 < len(bounds) else total)
        p = welch_p(sums, (edges[0], edges[1]), (edges[1], edges[2]), floor)
        return 1.0 if math.isnan(p) else p

    ps = [p_at(i) for i in range(len(bounds))]
    while bounds:
        worst = max(range(len(ps)), key=ps.__getitem__)
        if ps[worst] < alpha:
            break
        del bounds[worst], ps[worst]
        for i in (worst - 1, worst):
            if 0 <= i < len(bounds):
                ps[i] = p_at(i)
    return list(zip(bounds, ps))


def segments_of(points: Sequence[Sequence[float]], bounds: Sequence[int]) -> list[Segment]:
    """The segments between ``bounds`` with their levels."""
    edges = [0, *bounds, len(points)]
    out = []
    for start, stop in zip(edges, edges[1:]):
        part = points[start:stop]
        trials = [v for p in part for v in p]
        lo, hi = log_t_interval([median(p) for p in part])
        out.append(Segment(start=start, stop=stop, median_s=median(trials), lo_s=lo, hi_s=hi, trials=tuple(trials)))
    return out


# ---------------------------------------------------------------- reporting
def _direction(ratio: float) -> str:
    return Direction.REGRESSION if ratio > 1 else Direction.IMPROVEMENT


def _beyond_significantly(
    sums: _Sums, segments: list[Segment], i: int, step: Step, threshold: float, floor: float
) -> bool:
    """Is step ``i`` (between segments i and i + 1) beyond the threshold, one-sided p < APART_ALPHA?"""
    from scipy.special import stdtr

    if not Threshold(threshold).beyond(step.ratio):
        return False
    m1, s1, n1 = sums.side(segments[i].start, segments[i].stop, floor)
    m2, s2, n2 = sums.side(segments[i + 1].start, segments[i + 1].stop, floor)
    if n1 < 2 or n2 < 2:
        return False
    v1, v2 = s1 * s1 / n1, s2 * s2 / n2
    se = math.sqrt(v1 + v2)
    if se == 0:
        return True
    df = (v1 + v2) ** 2 / ((v1 * v1 / (n1 - 1) if v1 else 0.0) + (v2 * v2 / (n2 - 1) if v2 else 0.0) or 1e-300)
    bound = Threshold(threshold).log_up if step.ratio > 1 else -Threshold(threshold).log_down
    t = (abs(m2 - m1) - bound) / se
    return float(stdtr(df, -t)) < APART_ALPHA


def _groups(steps: list[Step], apart: list[bool]) -> list[list[int]]:
    """Consecutive steps in one direction, as indices into ``steps``; two neighbours that are each
    significantly beyond the threshold (``apart``) stay apart (two regressions, not one creep)."""
    groups: list[list[int]] = []
    for i, step in enumerate(steps):
        if groups:
            j = groups[-1][-1]
            if _direction(steps[j].ratio) == _direction(step.ratio) and not (apart[j] and apart[i]):
                groups[-1].append(i)
                continue
        groups.append([i])
    return groups


def _location_set(means: Sequence[float], change: Change, scatter: float) -> tuple[int, int]:
    """Where the change may have happened: the first and last split between the segments around
    it whose one-split fit is within :data:`LOCATION_SLACK` x scatter^2 of the best split's (a
    likelihood-ratio confidence set on the per-point means). A sharp step keeps its commit; a
    creep of steps too small to confirm one by one spreads the range over all of them."""
    import numpy as np

    start, stop = change.before.start, change.after.stop
    values = np.asarray(means[start:stop], dtype=float)
    prefix = np.concatenate([[0.0], np.cumsum(values)])
    cut = np.arange(1, len(values))
    n = len(values)
    gain = prefix[cut] ** 2 / cut + (prefix[n] - prefix[cut]) ** 2 / (n - cut) - prefix[n] ** 2 / n
    near = cut[gain >= gain.max() - LOCATION_SLACK * scatter**2] + start
    lo, hi = change.last_before + 1, change.first_after
    return min(lo, int(near.min())), max(hi, int(near.max()))


def _report(
    sums: _Sums, segments: list[Segment], steps: list[Step], threshold: float, alpha: float, floor: float
) -> list[Change]:
    """Each group of confirmed same-direction steps, tested between the segment before its first
    step and the segment after its last: reported when beyond the threshold and p < alpha."""
    out = []
    apart = [_beyond_significantly(sums, segments, i, step, threshold, floor) for i, step in enumerate(steps)]
    for group in _groups(steps, apart):
        before, after = segments[group[0]], segments[group[-1] + 1]
        ratio = after.median_s / before.median_s
        if not Threshold(threshold).beyond(ratio) or _direction(ratio) != _direction(steps[group[0]].ratio):
            continue
        p = welch_p(sums, (before.start, before.stop), (after.start, after.stop), floor)
        if not p < alpha:
            continue
        # The commit named is the one after the group's largest step; the range runs from the last
        # point at the old level to the first at the new one (for a creep, over every step).
        main = max(group, key=lambda i: abs(math.log(steps[i].ratio)))
        change = Change(
            first=steps[main].index,
            last_before=steps[group[0]].index - 1,
            first_after=steps[group[-1]].index,
            before=before,
            after=after,
            ratio=ratio,
            p=p,
            direction=_direction(ratio),
            steps=tuple(steps[i].index for i in group),
        )
        first, last = _location_set(sums.means, change, floor)
        out.append(dataclasses.replace(change, last_before=first - 1, first_after=last))
    return out


@dataclass(kw_only=True)
class SeriesChanges:
    """What :func:`find_changes` found in one series."""

    segments: list[Segment]
    steps: list[Step]  # every boundary confirmed at alpha (reported or not)
    changes: list[Change]  # what is reported: beyond the threshold, alone or as creep
    scatter: float  # the per-point sd of the mean log time used as the floor
    claimed: bool  # False: too few points to claim anything


def _steps(segments: list[Segment], kept: list[tuple[int, float]]) -> list[Step]:
    return [Step(index=b, ratio=segments[i + 1].median_s / segments[i].median_s, p=p) for i, (b, p) in enumerate(kept)]


def find_changes(
    points: Sequence[Sequence[float]], *, threshold: float = DEFAULT_THRESHOLD, alpha: float = DEFAULT_ALPHA
) -> SeriesChanges:
    """Change points of a series (one non-empty list of positive trial times per point)."""
    points = [list(p) for p in points]
    if any(not p or min(p) <= 0 for p in points):
        raise ValueError("find_changes: expected a non-empty list of positive trial times per point")
    if len(points) < MIN_POINTS:
        return SeriesChanges(
            segments=segments_of(points, []) if points else [], steps=[], changes=[], scatter=math.nan, claimed=False
        )
    sums = _Sums(points)
    # A point's mean varies at least as much as its own trials allow (runs that agree exactly
    # would otherwise make any difference infinitely significant).
    scatter = max(commit_scatter(sums.means), _within(sums))
    alpha = alpha * min(1.0, REFERENCE_POINTS / len(points))
    kept = _prune(sums, len(points), _candidates(sums.means, scatter), scatter, alpha)
    segments = segments_of(points, [b for b, _ in kept])
    steps = _steps(segments, kept)
    changes = _report(sums, segments, steps, threshold, alpha, scatter)
    return SeriesChanges(segments=segments, steps=steps, changes=changes, scatter=scatter, claimed=True)
