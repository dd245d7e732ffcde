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
    "Threshold",
    "CONTROL_CAP",
    "DISTURBED_SPREADS",
    "MIN_PAIRS",
    "REMEASURE_SHARE",
    "SHOWN_CONFIDENCE",
    "DisturbanceLimits",
    "PairedRatio",
    "TrialSeries",
    "busy_run_line",
    "busy_throughout",
    "coefficient_of_variation",
    "disturbance_limits",
    "find_disturbed",
    "left_out",
    "log_t_interval",
    "median",
    "hull_interval",
    "mean_interval",
    "median_rate",
    "or_none",
    "paired_ratio",
    "percentile",
    "positive",
]

MIN_PAIRS = 3
"""The fewest pairs an interval is read from: the spread of two pairs is one difference, and a
median one trial cannot move needs three (the disturbed-trial rule's minimum too)."""


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


def median_rate(rates: Sequence[float]) -> float:
    """The rate at the median time: ``1 / median(1 / rate)`` over ``rates`` (samples/s of each
    trial), NaN for none. A throughput is the global batch over the headline step time, the median
    of the trials' times; with an even count that median averages two times, and the median of the
    rates (which averages two rates) would be another number for the same configuration."""
    times = [1.0 / r for r in rates if r > 0]
    return 1.0 / median(times) if times else math.nan


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


def _t_half(logs: Sequence[float], confidence: float) -> float:
    """Half the width of the t-interval of the mean of ``logs`` at ``confidence`` (two-sided)."""
    # scipy.special, not scipy.stats: the same quantile, without the ~0.7 s import of scipy.stats
    # that the report and the gate would pay for this one function.
    from scipy.special import stdtrit

    return float(stdtrit(len(logs) - 1, 0.5 + confidence / 2)) * statistics.stdev(logs) / math.sqrt(len(logs))


def mean_interval(logs: Sequence[float], confidence: float) -> tuple[float, float]:
    """Student's t-interval of the mean of ``logs`` at ``confidence`` (NaNs with fewer than two)."""
    if len(logs) < 2:
        return math.nan, math.nan
    mean, half = statistics.fmean(logs), _t_half(logs, confidence)
    return mean - half, mean + half


def log_t_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """A ``confidence`` interval of the centre of positive ``values``: a t-interval of their
    logs, exp'd back (NaNs with fewer than two values)."""
    lo, hi = mean_interval([math.log(v) for v in positive(values)], confidence)
    return math.exp(lo), math.exp(hi)


def hull_interval(logs: Sequence[float], confidence: float) -> tuple[float, float]:
    """The interval every paired ratio carries, on the log scale: the t-interval of the mean of
    ``logs`` at ``confidence``, widened where it must be to hold their median (NaNs with fewer than
    :data:`MIN_PAIRS`).

    The ratio dpbench shows is the median of the pairs (one wild pair moves it by one rank); the
    interval is the mean's, whose width uses the sizes of the differences and so reaches a level
    per question in a handful of pairs, where the sign test's order statistics cannot (their
    smallest error at n pairs is 2/2^n). Widened to hold the median, no view prints a ratio outside
    its own interval, and a claim needs the t-interval and the shown ratio on the same side of 1;
    its error is at most the t-interval's (docs/validation/decision.md, "The choice")."""
    if len(logs) < MIN_PAIRS:
        return math.nan, math.nan
    (lo, hi), centre = mean_interval(logs, confidence), statistics.median(logs)
    return min(lo, centre), max(hi, centre)


@dataclass(frozen=True, kw_only=True)
class PairedRatio:
    """``numerator / denominator`` from trials paired by index: the median of the per-pair
    ratios (exp of the median of their logs) and its interval (:func:`hull_interval`; NaN with
    fewer than :data:`MIN_PAIRS` pairs). One wild pair — a trial the machine disturbed — moves the
    median by at most one rank, where it moved a geometric mean without limit."""

    ratio: float
    lo: float
    hi: float
    pairs: int
    ratios: tuple[float, ...] = ()  # the per-pair ratios behind it
    confidence: float = math.nan  # the interval's nominal coverage, this comparison's alone

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
            confidence=self.confidence,
        )

    def scaled(self, factor: float) -> PairedRatio:
        return PairedRatio(
            ratio=self.ratio * factor,
            lo=self.lo * factor,
            hi=self.hi * factor,
            pairs=self.pairs,
            ratios=tuple(r * factor for r in self.ratios),
            confidence=self.confidence,
        )

    @property
    def excludes_one(self) -> bool:
        """The interval lies wholly above or below 1 (False when unknown)."""
        return self.pairs >= MIN_PAIRS and (self.lo > 1 or self.hi < 1)


SHOWN_CONFIDENCE = 0.95
"""The coverage of an interval shown beside a number (a table's ``× single (95% CI)``, a saved
run's ``relative_to_ddp``): one comparison's own. A claim asks more of each of its question's
comparisons (:func:`dpbench.decision.claims.comparison_level`)."""


def paired_ratio(
    numerator: Sequence[float], denominator: Sequence[float], confidence: float = SHOWN_CONFIDENCE
) -> PairedRatio:
    """Trial i of one case against trial i of another: interleaved trials ran close in time, so
    pairing cancels what the machine did between passes. Extra trials on one side are unpaired
    and left out, and so is a pair with a missing (NaN) trial on either side: a disturbed trial
    left out keeps its slot as NaN, so the other slots stay paired. The interval is at
    ``confidence`` for this comparison alone (:func:`hull_interval`)."""
    ratios = positive(
        [
            a / b
            for a, b in zip(numerator, denominator)
            if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > 0
        ]
    )
    if not ratios:
        return PairedRatio(ratio=math.nan, lo=math.nan, hi=math.nan, pairs=0)
    # exp(median of logs) is the median of the ratios (exp is monotonic), but for an even count the
    # middle two are averaged on the log scale, so that a ratio and its inverse stay inverses.
    centre = math.exp(statistics.median(math.log(r) for r in ratios))
    lo, hi = hull_interval([math.log(r) for r in ratios], confidence)
    return PairedRatio(
        ratio=centre, lo=math.exp(lo), hi=math.exp(hi), pairs=len(ratios), ratios=tuple(ratios), confidence=confidence
    )


# ---------------------------------------------------------------- disturbed trials
# A trial is disturbed when the machine, not the code, moved it: something else ran on its cores.
# Both limits come from the run's own measured spread, in robust sds (1.4826 × the median absolute
# log deviation, which a few disturbed trials do not inflate): a clean trial 6 robust sds out is
# as good as impossible under a normal model (~1e-9), and shared machines' heavier tails still sit
# well inside it. The floors keep a machine whose spread is tiny (a GPU's controls agree to 0.1%)
# from flagging a wobble no result would notice.
DISTURBED_SPREADS = 6.0
CONTROL_FLOOR = 1.25  # a control at most this many times its placement's median is never "disturbed"
TRIAL_FLOOR = 2.0  # nor a trial at most this many times its case's median
# ... and beyond these it always is, however wide the run's spread: on a machine busy all run long
# the spread itself is the disturbance, and limits taken from it alone would flag nothing.
CONTROL_CAP = 2.0
TRIAL_CAP = 3.0
# At most this share of the planned trials is measured again (at least one): the extra pass costs
# at most about a fifth of the planned passes' time. More disturbed than that, and the machine was
# busy: the run says its results are unreliable (busy_run_line, which the session and the report print).
REMEASURE_SHARE = 0.2
TRIAL_RULE_MIN = MIN_PAIRS  # the trial rule needs a median that one trial cannot move
MIN_KEPT = 2  # disturbed trials are left out only while this many (and half the case's) remain


@dataclass(frozen=True, kw_only=True)
class TrialSeries:
    """One case's trials as detection reads them. ``placement``: which ranks, threads and cores the
    trials ran on (controls compare only within one placement); ``values``: step times per trial;
    ``controls``: control times per trial (shorter or empty where unknown)."""

    placement: str
    values: tuple[float, ...]
    controls: tuple[float, ...] = ()


@dataclass(frozen=True, kw_only=True)
class DisturbanceLimits:
    """What the run's clean trials look like: the median control per placement, and the limits
    (ratios) beyond which a control, or a trial against its case's median, is disturbed."""

    control_median: dict[str, float]
    control_limit: float
    trial_limit: float
    control_spread: float = 0.0  # the run's robust sd of log control / its placement's median

    @property
    def noisy(self) -> bool:
        """The run's controls spread so wide that the control limit hit its cap (:func:`busy_throughout`)."""
        return busy_throughout(self.control_spread)

    def why(self, series: TrialSeries, index: int) -> str | None:
        """Why trial ``index`` of ``series`` is disturbed, or None: its control against its
        placement's median, then its step time against the median of ``series.values`` (a
        re-measurement is judged in a series of the trials it may join)."""
        controls = series.controls
        centre = self.control_median.get(series.placement, math.nan)
        if index < len(controls) and controls[index] > 0 and centre > 0:
            seen = controls[index] / centre
            if seen > self.control_limit:
                return (
                    f"control {controls[index] * 1e3:.3g} ms = {seen:.1f}x the median control of its placement "
                    f"(limit {self.control_limit:.2f}x)"
                )
        values = positive(series.values)
        value = series.values[index] if index < len(series.values) else math.nan
        if len(values) >= TRIAL_RULE_MIN and value > 0:
            seen = value / statistics.median(values)
            if seen > self.trial_limit:
                return (
                    f"step time {value * 1e3:.3g} ms = {seen:.1f}x its case's median trial "
                    f"(limit {self.trial_limit:.2f}x; its control did not see it)"
                )
        return None


def busy_throughout(control_spread: float) -> bool:
    """A run's controls (``control_spread``: their robust sd of log control / its placement's median)
    spread so wide that the control limit hit its cap: the machine was busy throughout, not for a
    trial or two (the run's results are unreliable). False for NaN (not known)."""
    return DISTURBED_SPREADS * control_spread > math.log(CONTROL_CAP)


def busy_run_line(
    *,
    disturbed: int,
    total: int,
    unreplaced: int,
    control_spread: float,
    share: float = REMEASURE_SHARE,
    others_quiet: bool = False,
) -> str | None:
    """The run's line where more than ``share`` of its ``total`` trials were ``disturbed``
    (``unreplaced`` of them not measured again), or where its controls spread so wide that the
    machine was busy throughout (:func:`busy_throughout`); else None.

    ``others_quiet``: the sampler read the run's trials and other processes used little of the
    machine (:func:`dpbench.decision.contention.others_quiet`). The controls' spread alone then
    says nothing of a neighbour: on the quiet development VM it reached ±18% (robust sd) with no
    other process running, past the ±12% the rule allows, while beside a measured neighbour it
    often stayed within it (docs/validation/decision.md#the-busy-line-on-a-quiet-machine)."""
    if total and busy_throughout(control_spread) and not others_quiet and disturbed <= share * total:
        return (
            f"the machine was busy throughout: the controls spread by ±{math.expm1(control_spread):.0%} (robust sd), "
            f"{disturbed} of {total} trials stood out: results are unreliable"
        )
    if not total or disturbed <= share * total:
        return None
    left = f", {unreplaced} of them not measured again" if unreplaced else ", each measured again"
    return (
        f"the machine was busy during {disturbed / total:.0%} of the trials ({disturbed} of {total}{left}): "
        "results are unreliable"
    )


def _robust_sd(deviations: Sequence[float]) -> float:
    return 1.4826 * statistics.median(abs(d) for d in deviations) if deviations else 0.0


def disturbance_limits(cases: Sequence[TrialSeries]) -> DisturbanceLimits:
    """The limits from one run's cases (each case once): controls against the median control of
    their placement, trials against their case's median trial, each limit
    ``exp(DISTURBED_SPREADS × robust sd)`` kept between its floor and its cap."""
    by_placement: dict[str, list[float]] = {}
    for case in cases:
        by_placement.setdefault(case.placement, []).extend(positive(case.controls))
    centres = {p: statistics.median(c) for p, c in by_placement.items() if c}
    control_logs = [math.log(c / centres[p]) for p, cs in by_placement.items() if cs for c in cs]
    trial_logs = []
    for case in cases:
        values = positive(case.values)
        if len(values) >= TRIAL_RULE_MIN:
            centre = statistics.median(values)
            trial_logs += [math.log(v / centre) for v in values]
    control_sd = _robust_sd(control_logs)
    return DisturbanceLimits(
        control_median=centres,
        control_limit=_limit(control_sd, CONTROL_FLOOR, CONTROL_CAP),
        trial_limit=_limit(_robust_sd(trial_logs), TRIAL_FLOOR, TRIAL_CAP),
        control_spread=control_sd,
    )


def _limit(sd: float, floor: float, cap: float) -> float:
    return math.exp(min(max(DISTURBED_SPREADS * sd, math.log(floor)), math.log(cap)))


def find_disturbed(
    cases: dict[str, TrialSeries], limits: DisturbanceLimits | None = None
) -> dict[str, list[str | None]]:
    """Per case, per trial: why it is disturbed, or None (limits: from these cases, by default)."""
    limits = limits or disturbance_limits(list(cases.values()))
    return {key: [limits.why(case, i) for i in range(len(case.values))] for key, case in cases.items()}


def left_out(why: Sequence[str | None]) -> list[bool]:
    """Which trials every estimate leaves out: the disturbed ones (``why`` not None; a replaced
    trial's slot holds its clean re-measurement and is None here), as long as :data:`MIN_KEPT`
    trials and half of them remain; otherwise none, and the case's warning says its numbers hold
    disturbed trials."""
    out = [w is not None for w in why]
    kept = len(out) - sum(out)
    return out if any(out) and kept >= MIN_KEPT and 2 * kept >= len(out) else [False] * len(out)


@dataclass(frozen=True)
class Threshold:
    """The smallest change that counts, one rule for every verdict: a ratio (candidate / baseline,
    or after / before) is a slowdown beyond ``1 + value`` and a speedup beyond ``1 - value``.

    The gate's per-case and broad verdicts, its machine-move check, ``next_step``'s plans and the
    history's change points all ask this type, so no two of them can draw the line differently."""

    value: float
    """the fraction: 0.1 is 10%"""

    def slower(self, ratio: float) -> bool:
        """Beyond the threshold on the slow side."""
        return ratio > 1 + self.value

    def faster(self, ratio: float) -> bool:
        """Beyond the threshold on the fast side."""
        return ratio < 1 - self.value

    def beyond(self, ratio: float) -> bool:
        """Beyond it either way."""
        return self.slower(ratio) or self.faster(ratio)

    @property
    def log_up(self) -> float:
        """The slow bound on the log scale the tests work on: ``log(1 + value)``."""
        return math.log1p(self.value)

    @property
    def log_down(self) -> float:
        """The fast bound on the log scale: ``log(1 - value)`` (minus infinity at 100% and above)."""
        return math.log1p(-self.value) if self.value < 1 else -math.inf
