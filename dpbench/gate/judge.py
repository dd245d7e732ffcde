"""The gate's statistics: one family of benchmarks, judged together.

The noise model behind it (fitted from real runs by :mod:`dpbench.gate.noise`, checked by
``scripts/simulate_gate.py``): on a log scale a trial of benchmark *b* in run *r* is

    log y = mu_b + R_r + U_br + e_brt,   e ~ N(0, s_b²),  U ~ N(0, tau²),

a run-wide offset ``R`` (the machine that day), a per-benchmark-per-run offset ``U`` (what a
fresh session of the suite does to this case) and the between-trial spread ``s_b``, which
differs widely from benchmark to benchmark. What that means for the test:

* ``s_b`` from 3-6 trials is a poor estimate, so it is *moderated* (limma's empirical Bayes,
  Smyth 2004): each benchmark's variance is shrunk towards the run's typical one, with the
  prior's weight ``d0`` fitted from how much the benchmarks' variances really differ. Unlike a
  hard floor this lowers the assumed spread of a steady benchmark as well as raising that of a
  benchmark that came out too steady by chance.
* Trials of one run share ``U``: trials pooled from one run per side say nothing about it.
  ``tau²`` is estimated from the run itself, from how far the benchmarks' log ratios scatter
  around their median beyond what their trial spread explains (a robust moment estimator:
  the median of the squared standardised residuals is set to that of a chi-square with one
  degree of freedom), and from ``--aa`` runs the same way; the larger is used.
* ``R`` moves every benchmark alike. Two things measure it: the controls (a fixed computation
  timed in the same workers; their median over the run, which carries the controls' own run
  offset, :data:`CONTROL_RUN_SD`) and the other benchmarks (the median log ratio of every case but
  the one judged). The benchmarks' median is the more precise and is used, unless the benchmarks as
  a whole moved beyond the controls by more than the threshold, significantly: then the code moved
  everything, and each case is judged beyond the controls (``family._machine_shift``). A machine
  that got slower excuses the slowdown it explains and no more; one that got faster never makes a
  slowdown out of an unchanged case.
* One ``regressed`` among ~70 benchmarks fails the job, so p-values are corrected across the
  distinct cases (Holm: the family-wise error rate is at most ``alpha`` where the variances are
  right). With ``--aa`` runs (each case's between-run offset measured) the p-value is against
  *no change* beyond the machine and the threshold is a separate effect-size bar (both must
  hold, as in pyperf and asv); without them it is against the threshold itself, because one
  comparison cannot tell which cases a session moves most (``family._null_bounds``).

Three designs, chosen from the data (``Method``):

* ``trials``: runs with several trials each. Variance of a side's mean log = s²/N + tau²·Σn²/N².
* ``runs``: every run holds one trial (each trial its own session): the spread across the
  side's trials already covers ``U``; tau is not added.
* ``paired``: ``dpbench ab``: run i of the baseline and run i of the candidate ran next to
  each other; the log ratios of the pairs are the sample, which cancels drift between pairs.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from enum import Enum
from typing import Sequence

__all__ = ["BIG_DF", "CHI2_1_MEDIAN", "CONTROL_RUN_SD", "TAU_CUT", "TAU_QUANTILE", "MIN_OTHERS", "MIN_PAIRS",
           "MIN_TRIALS", "Evidence", "Method", "Pooled", "Prior", "between_run_variance",
           "evidence", "fit_prior", "holm", "moderate", "trigamma_inverse"]

MIN_TRIALS = 2  # per side, for compare (fewer: inconclusive, "needs ≥ 2 trials a side")
MIN_PAIRS = 2  # for paired ab
# The controls' own run offset beyond the benchmarks' run-wide one (log sd): how far the controls' move
# may stray from the machine's. Fitted by scripts/aa_check on this 2-core VM: 3.0% (2026-12-01), 4.1%
# (2026-12-02); the larger is used. It decides when the benchmarks as a whole moved beyond the controls.
CONTROL_RUN_SD = 0.041
MIN_OTHERS = 4  # other cases needed for their median to estimate the machine's move (else: the controls)
CHI2_1_MEDIAN = 0.454936423119572  # scipy.stats.chi2.ppf(0.5, 1)
# The between-run spread is matched at this quantile of the benchmarks' standardised residuals, not at
# their median: cases differ in how much a session moves them, and one run a side cannot tell which
# case moves how much, so the test allows for the larger offsets the family shows (while the top
# tenth, where real changes sit, still does not set it). Chosen by scripts/simulate_gate.py.
TAU_QUANTILE = 0.9
TAU_CUT = 3.0  # sds: a benchmark further from "no change" than this does not set the spread
BIG_DF = 1e6  # a prior "known exactly": d0 = ∞ is stored as this, so the t-test is a z-test


class Method(str, Enum):
    """How a comparison's samples are formed; saved in ``--json`` output."""

    TRIALS = "trials"  # runs of several trials each: within-run spread + between-run tau
    RUNS = "runs"  # every run one trial: the spread across runs covers the between-run part
    PAIRED = "paired"  # run i of each side ran together (dpbench ab): log ratios of the pairs


@dataclass(kw_only=True)
class Pooled:
    """One benchmark on one side: its trial times run by run (in run order), and controls."""

    unit: str
    runs: list[list[float]]
    control_runs: list[list[float]] = field(default_factory=list)
    incomparable: str | None = None
    case_key: str | None = None

    @property
    def times(self) -> list[float]:
        return [t for run in self.runs for t in run]

    @property
    def controls(self) -> list[float]:
        return [c for run in self.control_runs for c in run]


@dataclass(frozen=True, kw_only=True)
class Prior:
    """The run's typical trial variance (log scale) ``s2`` and its weight in degrees of freedom."""

    s2: float
    df: float


@dataclass(kw_only=True)
class Evidence:
    """What one benchmark contributes to the test before the family is known."""

    diff: float  # mean log(candidate) − mean log(baseline), or the mean log ratio of the pairs
    s2: float  # its own variance estimate (log scale; NaN where df = 0)
    df: float  # degrees of freedom of s2
    a: float  # var(diff) = s2 · a + tau² · b
    b: float
    pairs: int = 0


def trigamma_inverse(x: float) -> float:
    """y with trigamma(y) = x (Newton's method as in limma's ``trigammaInverse``).

    scipy has trigamma (``polygamma(1, ·)``) but not its inverse; this is the standard
    iteration, written here because no maintained package in our stack offers it."""
    from scipy.special import polygamma

    if x > 1e7:
        return 1 / math.sqrt(x)
    if x < 1e-6:
        return 1 / x
    y = 0.5 + 1 / x
    for _ in range(50):
        tri = float(polygamma(1, y))
        step = tri * (1 - tri / x) / float(polygamma(2, y))
        y += step
        if -step / y < 1e-8:
            break
    return y


def fit_prior(variances: Sequence[float], dfs: Sequence[float]) -> Prior:
    """The scaled inverse chi-square prior of per-benchmark variances (limma's ``fitFDist``,
    method of moments on log variances). Needs three benchmarks with a variance; else none."""
    from scipy.special import digamma, polygamma

    points = [(v, d) for v, d in zip(variances, dfs) if d > 0 and v > 0 and math.isfinite(v)]
    if len(points) < 3:
        return Prior(s2=math.nan, df=0.0)
    e = [math.log(v) - float(digamma(d / 2)) + math.log(d / 2) for v, d in points]
    mean_e = statistics.fmean(e)
    excess = statistics.variance(e) - statistics.fmean(float(polygamma(1, d / 2)) for _, d in points)
    if excess <= 0:  # the variances differ no more than sampling explains: one variance for all
        return Prior(s2=math.exp(mean_e), df=BIG_DF)
    d0 = 2 * trigamma_inverse(excess)
    return Prior(s2=math.exp(mean_e + float(digamma(d0 / 2)) - math.log(d0 / 2)), df=d0)


def moderate(s2: float, df: float, prior: Prior) -> tuple[float, float]:
    """``(moderated variance, its degrees of freedom)``: the benchmark's own and the prior's,
    weighted by their degrees of freedom."""
    if prior.df <= 0 or math.isnan(prior.s2):
        return s2, df
    own = s2 * df if df > 0 else 0.0
    return (prior.df * prior.s2 + own) / (prior.df + df), prior.df + df


def _tau2_at(points: list[tuple[float, float, float]], quantile: float, target: float) -> float:
    """tau² at which the ``quantile`` of r² / (v + tau² w) over ``points`` equals ``target`` (bisection)."""
    from dpbench.stats import percentile

    def score(tau2: float) -> float:
        return percentile([r2 / max(v + tau2 * w, 1e-300) for r2, v, w in points], 100 * quantile)

    if len(points) < 3 or score(0.0) <= target:
        return 0.0
    lo, hi = 0.0, max(r2 / w for r2, _, w in points)
    for _ in range(40):  # score falls as tau² grows: bisect (to 1e-12 of the bracket)
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if score(mid) > target else (lo, mid)
    return (lo + hi) / 2


def between_run_variance(residuals: Sequence[float], within: Sequence[float], weights: Sequence[float],
                         quantile: float = TAU_QUANTILE, cut: float = TAU_CUT) -> float:
    """tau² from the benchmarks' log ratios around their median ("the spread of the ones that did not change").

    ``residuals``: each benchmark's log ratio minus the median; ``within``: each one's variance from
    its trial spread; ``weights``: how much of tau² its log ratio carries. First a median match
    (robust while fewer than half changed), then, among the benchmarks within ``cut`` sds of no
    change, tau² such that the ``quantile`` of r² / (within + tau² · weight) is a (truncated)
    chi-square(1)'s: iterated, so a group of real changes never widens the spread it is judged by,
    while cases that move more than most between sessions still do. 0 when the trial spread
    explains the scatter."""
    from scipy.special import chdtr, chdtri  # chi-square cdf and inverse survival (no scipy.stats import)

    points = [(r * r, v, w) for r, v, w in zip(residuals, within, weights) if w > 0 and v >= 0 and math.isfinite(v)]
    tau2 = _tau2_at(points, 0.5, CHI2_1_MEDIAN)
    kept_share = float(chdtr(1, cut * cut))
    target = float(chdtri(1, 1 - quantile * kept_share))
    for _ in range(20):
        kept = [p for p in points if p[0] <= cut * cut * (p[1] + tau2 * p[2])]
        new = _tau2_at(kept, quantile, target)
        if abs(new - tau2) <= 1e-12 + 1e-6 * tau2:
            return new
        tau2 = new
    return tau2


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (NaN stays NaN and does not count towards the family).

    Hand-written because statsmodels (``multipletests``) is not in our stack for ten lines."""
    order = sorted((p, i) for i, p in enumerate(pvalues) if not math.isnan(p))
    m = len(order)
    out = [math.nan] * len(pvalues)
    running = 0.0
    for rank, (p, i) in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


# ---------------------------------------------------------------- one benchmark's evidence
def _logs(run: Sequence[float]) -> list[float]:
    return [math.log(t) for t in run]


def _mean_log(side: Pooled) -> float:
    return statistics.fmean(_logs(side.times))


def _share(side: Pooled) -> float:
    """Σ n_r² / N²: how much of one run's offset a side's mean carries (1 for one run)."""
    counts = [len(run) for run in side.runs if run]
    return sum(n * n for n in counts) / sum(counts) ** 2


def _within(sides: Sequence[Pooled]) -> tuple[float, int]:
    """Pooled variance of log trials around their own run's mean, and its degrees of freedom."""
    ss, df = 0.0, 0
    for side in sides:
        for run in side.runs:
            if len(run) >= 2:
                logs = _logs(run)
                mean = statistics.fmean(logs)
                ss += sum((v - mean) ** 2 for v in logs)
                df += len(logs) - 1
    return (ss / df if df else math.nan), df


def _across(sides: Sequence[Pooled]) -> tuple[float, int]:
    """Pooled variance of log trials around their side's mean (every trial its own run)."""
    ss, df = 0.0, 0
    for side in sides:
        logs = _logs(side.times)
        if len(logs) >= 2:
            mean = statistics.fmean(logs)
            ss += sum((v - mean) ** 2 for v in logs)
            df += len(logs) - 1
    return (ss / df if df else math.nan), df


def evidence(base: Pooled, cand: Pooled, method: Method) -> Evidence:
    """The log difference and its variance terms for one benchmark under ``method``."""
    if method == Method.PAIRED:
        ratios = [math.log(c) - math.log(b) for b_run, c_run in zip(base.runs, cand.runs)
                  for b, c in zip(b_run, c_run)]
        s2 = statistics.variance(ratios) if len(ratios) >= 2 else math.nan
        return Evidence(diff=statistics.fmean(ratios), s2=s2, df=max(0, len(ratios) - 1),
                        a=1 / len(ratios), b=0.0, pairs=len(ratios))
    nb, nc = len(base.times), len(cand.times)
    diff = _mean_log(cand) - _mean_log(base)
    if method == Method.RUNS:
        s2, df = _across((base, cand))
        return Evidence(diff=diff, s2=s2, df=df, a=1 / nb + 1 / nc, b=0.0)
    s2, df = _within((base, cand))
    return Evidence(diff=diff, s2=s2, df=df, a=1 / nb + 1 / nc, b=_share(base) + _share(cand))
