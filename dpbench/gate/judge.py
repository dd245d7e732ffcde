"""The gate's statistics: one family of benchmarks, judged together.

The noise model behind it (fitted from real runs by :mod:`validation.noise`, checked by
``python -m validation.simulate_gate``): on a log scale a trial of benchmark *b* in run *r* is

    log y = mu_b + R_r + U_br + e_brt,   e ~ N(0, s_b²),  U ~ N(0, tau²),

a run-wide offset ``R`` (the machine that day), a per-benchmark-per-run offset ``U`` (what a
fresh session of the suite does to this case) and the between-trial spread ``s_b``, which
differs widely from benchmark to benchmark. What that means for the test:

* ``s_b`` from 3-6 trials is a poor estimate, so it is *moderated* (empirical Bayes): the
  benchmarks' true trial sds are log-normal across the family, with a centre that follows each
  case's level (its mean log time: slower cases spread less; measurements:
  docs/calibration.md#trial-spread-across-cases) and a spread fitted by maximum likelihood from all the
  benchmarks' own estimates (``fit_prior``). Each benchmark's variance is then its posterior
  given that prior and its own chi-square estimate (``posterior``), and its p-value the normal
  tail averaged over that posterior (``tail_p``). Unlike a hard floor this lowers the assumed
  spread of a steady benchmark as well as raising that of one that came out too steady by
  chance; unlike limma's conjugate prior (inverse chi-square; docs/calibration.md#gate-rule-history), a
  steady benchmark among noisy ones is not lent most of their spread.
* Trials of one run share ``U``: trials pooled from one run per side say nothing about it, and
  cases differ in how far a session moves them. ``tau_b`` is log-normal across cases: its median
  is fitted by maximum likelihood from how far the benchmarks' log ratios scatter around their
  median beyond what their trial spread explains (the cases within 3 sd of no change, screened
  by a robust quantile match, so real changes do not widen it); its spread, which one residual
  per case can hardly show, is held at no less than :data:`BETWEEN_SPREAD_FLOOR` (the worst
  measured, rounded up) — each case's test then averages over that log-normal (``fit_between``,
  ``between_distribution``, ``tail_p``). ``--aa`` runs measure each case's own offsets: their
  log-normal across cases is fitted from the baseline's sessions, and each case's test uses its
  own posterior (``family._aa_between``).
* ``R`` moves every benchmark alike. Two things measure it: the controls (a fixed computation
  timed in the same workers; their median over the run, which carries the controls' own run
  offset, :data:`CONTROL_RUN_SD`) and the *reference* cases (``reference.reference_cases``: the
  cases that moved as the controls did — sought at a peak of the steadier cases' density within the
  controls' reach — so a change of most of the suite is not taken for the machine). The reference's
  median (every reference case but the one judged) is the more precise and is used, unless the
  reference as a whole moved beyond the controls by more than the threshold, significantly: then the
  code moved everything, and each case is judged beyond the controls (``machine_shift.machine_shift``).
  The between-run offset is fitted on the reference's side of the cases too, so a group of changed
  cases does not widen it. A machine that got slower excuses the slowdown it explains and no more;
  one that got faster never makes a slowdown out of an unchanged case.
* The job itself is judged once more (``broad``): "(nearly) everything slower while the controls
  held" — the reference's median beyond the controls, or more cases beyond the threshold at p < 0.05
  than no change allows (a binomial count) — is a broad regression and fails the job; its p-value
  is one more hypothesis in the cases' Holm family.
* One ``regressed`` among ~70 benchmarks fails the job, so p-values are corrected across the
  distinct cases (Holm: the family-wise error rate is at most ``alpha`` where the variances are
  right). The p-value is against *no change* beyond the machine, and the threshold is a
  separate effect-size bar (both must hold, as in pyperf and asv). Testing one run of several
  trials a side against the threshold instead is unnecessary with the heavy-tailed between-run
  term, and loses power (``python -m validation.simulate_gate --null threshold`` weighs it; measurements:
  docs/calibration.md#gate-rule-history).

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
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "BETWEEN_SPREAD_FLOOR",
    "CHI2_1_MEDIAN",
    "CONTROL_RUN_SD",
    "Evidence",
    "MAX_SPREAD",
    "MIN_OTHERS",
    "MIN_PAIRS",
    "MIN_TRIALS",
    "Method",
    "NO_SPREAD",
    "Pooled",
    "Posterior",
    "Prior",
    "TAU_CUT",
    "TAU_QUANTILE",
    "between_distribution",
    "between_run_variance",
    "fit_between",
    "fit_prior",
    "holm",
    "lognormal_ml",
    "lognormal_trend_ml",
    "posterior",
    "posterior_variance",
    "tail_p",
    "within_run_variance",
]

MIN_TRIALS = 2  # per side, for compare (fewer: inconclusive, "needs ≥ 2 trials a side")
MIN_PAIRS = 2  # for paired ab
# The controls' own run offset beyond the benchmarks' run-wide one (log sd): how far the controls' move
# may stray from the machine's. Fitted by python -m validation.aa_check; the largest fit is used (measurements:
# docs/calibration.md#control-run-offset). It decides when the benchmarks as a whole moved beyond the controls.
CONTROL_RUN_SD = 0.041
MIN_OTHERS = 4  # other cases needed for their median to estimate the machine's move (else: the controls)
CHI2_1_MEDIAN = 0.454936423119572  # scipy.stats.chi2.ppf(0.5, 1)
# The between-run spread is matched at this quantile of the benchmarks' standardised residuals, not at
# their median: cases differ in how much a session moves them, and one run a side cannot tell which
# case moves how much, so the test allows for the larger offsets the family shows (while the top
# tenth, where real changes sit, still does not set it). Chosen by python -m validation.simulate_gate.
TAU_QUANTILE = 0.9
TAU_CUT = 3.0  # sds: a benchmark further from "no change" than this does not set the spread
NO_SPREAD = 0.01  # a fitted spread of the benchmarks' log sds below this is none (one variance for all)
TREND_MIN_CASES = 10  # benchmarks needed before the prior's centre follows their level
PRIOR_GRID_STEP = 0.01  # log sd: the grid each benchmark's posterior is integrated on
PRIOR_FIT_STEP = 0.02  # log sd: the grid the gate's prior is fitted on (a likelihood of 8 df is ~0.25 wide)
# How unequally a fresh session may move the cases (sd of the log of each case's between-run sd) that one
# comparison cannot rule out: its own residuals fit the typical case's offset, barely their spread. The
# worst measured, rounded up; chosen by python -m validation.simulate_gate against the provisional "clean" model's
# A/A jobs (measurements: docs/calibration.md#between-run-spread-floor).
BETWEEN_SPREAD_FLOOR = 0.7
# The fit's bounds where a few cases dominate it (an --aa run with one case that jumped: the likelihood
# then prefers "all at ~0, spread without end"): at most this spread, at least this median offset.
BETWEEN_SPREAD_MAX = 1.5
BETWEEN_MIN_SD = 1e-6
BETWEEN_NODES = 81  # quadrature nodes over ±5 spreads of the between-run log-normal
NEGLIGIBLE = 1e-12  # probability of a grid point below which tail_p skips it (all of them: < 1e-9 of mass)


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
    """How the benchmarks' between-trial sds (log scale) spread: log-normal with median ``sd`` and
    ``spread`` the sd of log sd (0: one variance for all). NaN: fewer than three benchmarks with a
    variance, no prior (each benchmark's own variance, Student's t)."""

    sd: float  # at the centre level
    spread: float
    slope: float = 0.0  # d log sd / d level (level: a benchmark's mean log time)
    centre: float = 0.0  # the level ``sd`` is at


@dataclass(frozen=True, kw_only=True)
class Posterior:
    """A benchmark's true variance: grid points and their probabilities."""

    variances: np.ndarray
    weights: np.ndarray

    @property
    def mean(self) -> float:
        return float(self.weights @ self.variances)


@dataclass(kw_only=True)
class Evidence:
    """What one benchmark contributes to the test before the family is known."""

    diff: float  # mean log(candidate) − mean log(baseline), or the mean log ratio of the pairs
    s2: float  # its own variance estimate (log scale; NaN where df = 0)
    df: float  # degrees of freedom of s2
    a: float  # var(diff) = s2 · a + tau² · b
    b: float
    pairs: int = 0
    level: float = math.nan  # the baseline's mean log time: where the prior's trend is read


def within_run_variance(runs: Sequence[Sequence[float]]) -> float:
    """The pooled variance of values around their own run's mean (runs of one value add nothing);
    NaN without a degree of freedom."""
    ss = sum(sum((v - statistics.fmean(r)) ** 2 for v in r) for r in runs if len(r) >= 2)
    df = sum(len(r) - 1 for r in runs if len(r) >= 2)
    return ss / df if df else math.nan


def fit_prior(variances: Sequence[float], dfs: Sequence[float], levels: Sequence[float] | None = None) -> Prior:
    """The log-normal spread of the benchmarks' between-trial sds, by maximum likelihood
    (:func:`lognormal_trend_ml`: each benchmark's variance estimate is its true variance times a
    chi-square over its degrees of freedom). With ``levels`` (each benchmark's mean log time) and
    at least :data:`TREND_MIN_CASES` of them, the log sd's centre follows the level linearly: short
    steps and small collectives spread far more than long steps, and the trend explains much of the
    spread across cases (measurements: docs/calibration.md#trial-spread-across-cases). Needs three
    benchmarks with a variance; else none. A fitted spread under
    :data:`NO_SPREAD` is none: one variance (on the trend) for all."""
    points = [
        (v, d, lv)
        for v, d, lv in zip(variances, dfs, levels if levels is not None else [0.0] * len(dfs))
        if d > 0 and v >= 0 and math.isfinite(v) and math.isfinite(lv)
    ]
    if len(points) < 3:
        return Prior(sd=math.nan, spread=math.nan)
    centre = statistics.fmean(lv for _, _, lv in points) if len(points) >= TREND_MIN_CASES and levels else math.nan
    covariate = [lv - centre for _, _, lv in points] if math.isfinite(centre) else None
    sd, spread, slope = lognormal_trend_ml(
        [v * d for v, d, _ in points], [d for _, d, _ in points], covariate, step=PRIOR_FIT_STEP, span=3.0
    )
    centre = centre if math.isfinite(centre) else 0.0
    if not spread >= NO_SPREAD:  # one variance on the trend: its exact maximum-likelihood estimate
        scaled = sum(v * d * math.exp(-2 * slope * (lv - centre)) for v, d, lv in points)
        return Prior(sd=math.sqrt(scaled / sum(d for _, d, _ in points)), spread=0.0, slope=slope, centre=centre)
    return Prior(sd=sd, spread=spread, slope=slope, centre=centre)


def posterior(
    s2: float, df: float, prior: Prior, level: float = math.nan, known: float = 0.0, step: float = PRIOR_GRID_STEP
) -> Posterior | None:
    """A benchmark's true between-trial variance given its own estimate ``s2`` (``df`` degrees of
    freedom), its ``level`` (mean log time, for the prior's trend) and the family's log-normal prior,
    on a grid of log sd (within 10 of the prior's spreads of its centre: the prior's density beyond is
    e^-50 of its peak). None without a prior. ``known``: a variance the estimate carries beyond the
    one sought (``s2 ~ (σ² + known) χ²(df) / df``; the trial part of a between-run estimate)."""
    import numpy as np

    if not prior.sd > 0:  # NaN: no prior; 0: every case's trials agree exactly (no spread to pool)
        return None
    centre = math.log(prior.sd) + (prior.slope * (level - prior.centre) if math.isfinite(level) else 0.0)
    if prior.spread == 0:
        return Posterior(variances=np.array([math.exp(2 * centre)]), weights=np.array([1.0]))
    spread = prior.spread
    x = np.arange(centre - 10 * spread, centre + 10 * spread, min(step, spread / 20))
    log_w = -0.5 * ((x - centre) / spread) ** 2
    v = np.exp(2 * x)
    if df > 0 and math.isfinite(s2):
        ss = max(s2 * df, 1e-300)  # chi-square(df) likelihood of ss / (v + known), constants dropped
        log_total = np.log(np.maximum(v + max(known, 0.0), 1e-300))
        log_w = log_w + (df / 2 - 1) * (math.log(ss) - log_total) - ss / (2 * np.exp(log_total)) - log_total
    w = np.exp(log_w - log_w.max())
    return Posterior(variances=v, weights=w / w.sum())


def posterior_variance(s2: float, df: float, prior: Prior, level: float = math.nan) -> float:
    """The benchmark's expected true variance (its own estimate where there is no prior)."""
    post = posterior(s2, df, prior, level)
    return post.mean if post is not None else s2


def tail_p(
    excess: float,
    bound: float,
    a: float,
    extra: float,
    post: Posterior,
    upper: bool,
    between: Posterior | None = None,
    b: float = 0.0,
) -> float:
    """One-sided p of ``excess`` against ``bound`` when its variance is ``σ² a + τ² b + extra``, σ²
    drawn from ``post`` and τ² (the between-run offset's variance) from ``between``: a mixture of
    normal tails over both. Under the model this is exact (the mean log difference is independent of
    the trials' variance estimate); it replaces limma's moderated t, whose conjugate inverse
    chi-square prior pools variances additively, so a steady benchmark among noisy ones was lent most
    of their spread."""
    import numpy as np
    from scipy.special import ndtr

    keep = post.weights > NEGLIGIBLE  # grid points this improbable cannot move a p-value Holm would act on
    var, weights = post.variances[keep] * a + extra, post.weights[keep]
    if between is not None:
        near = between.weights > NEGLIGIBLE
        var = var[:, None] + between.variances[near][None, :] * b
        weights = weights[:, None] * between.weights[near][None, :]
    z = (excess - bound) / np.sqrt(np.maximum(var, 1e-300))
    return float(np.sum(weights * (ndtr(-z) if upper else ndtr(z))))


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


def between_run_variance(
    residuals: Sequence[float],
    within: Sequence[float],
    weights: Sequence[float],
    quantile: float = TAU_QUANTILE,
    cut: float = TAU_CUT,
) -> float:
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


def fit_between(
    residuals: Sequence[float],
    within: Sequence[float],
    weights: Sequence[float],
    *,
    floor: float = BETWEEN_SPREAD_FLOOR,
    cut: float = TAU_CUT,
) -> Prior:
    """How far a fresh session moves each case, from one comparison: log-normal across cases.

    ``residuals``: each case's log ratio minus the median; ``within``: each one's variance from its
    trial spread; ``weights``: how much of τ² its log ratio carries. The cases within ``cut`` sds of no
    change (screened with :func:`between_run_variance`, so a group of real changes does not widen it)
    give the median τ by maximum likelihood (:func:`lognormal_ml`, one degree of freedom each, the
    trial part known); their spread is fitted too, but one residual per case can hardly tell which
    cases a session moves more, so it is held within [``floor``, ``BETWEEN_SPREAD_MAX``], the median
    refitted for the bound (constrained maximum likelihood). → ``Prior(sd=median τ,
    spread)``; τ = 0 (no spread) with fewer than three cases or where the trial spread explains the
    scatter entirely."""
    points = [(r * r, v, w) for r, v, w in zip(residuals, within, weights) if w > 0 and v >= 0 and math.isfinite(v)]
    screen = between_run_variance(residuals, within, weights, cut=cut)
    kept = [(r2, v, w) for r2, v, w in points if r2 <= cut * cut * (v + screen * w)]
    if len(kept) < 3:
        return Prior(sd=0.0, spread=0.0)
    sd, spread = lognormal_ml(
        [r2 / w for r2, _, w in kept],
        [1] * len(kept),
        [v / w for _, v, w in kept],
        step=PRIOR_FIT_STEP,
        spread_bounds=(floor, BETWEEN_SPREAD_MAX),
    )
    return Prior(sd=sd, spread=spread)


def between_distribution(prior: Prior) -> Posterior:
    """The between-run variance τ² of a case about which only the family's log-normal is known, as
    quadrature nodes (``BETWEEN_NODES`` over ±5 spreads) and their weights."""
    import numpy as np

    if not (prior.sd > 0 and math.isfinite(prior.sd)):
        return Posterior(variances=np.array([0.0]), weights=np.array([1.0]))
    if not prior.spread > 0:
        return Posterior(variances=np.array([prior.sd**2]), weights=np.array([1.0]))
    nodes = np.linspace(-5.0, 5.0, BETWEEN_NODES)
    w = np.exp(-0.5 * nodes**2)
    return Posterior(variances=np.exp(2 * (math.log(prior.sd) + prior.spread * nodes)), weights=w / w.sum())


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


# Maximum-likelihood fits of a log-normal spread across benchmarks, from each benchmark's noisy
# chi-square estimate: the gate's trial-variance prior (:func:`dpbench.gate.judge.fit_prior`), its
# between-run offsets and the noise model of :mod:`validation.noise` use them.
# log sd: the widest log-normal fitted (a factor 20 per sd between cases), well above the spreads measured
# (docs/calibration.md#trial-spread-across-cases).
MAX_SPREAD = 3.0


def lognormal_ml(
    squares: Sequence[float],
    dfs: Sequence[float],
    known: Sequence[float] | None = None,
    step: float = 0.005,
    spread_bounds: tuple[float, float] | None = None,
) -> tuple[float, float]:
    """(median, sd of logs) of a log-normal spread ``x`` across benchmarks, by maximum likelihood,
    from each benchmark's sum of squares ``squares[k] ~ (x_k² + known[k]) · chi²(dfs[k])``.

    Why not the median and spread of each benchmark's own estimate: with a few runs, a
    benchmark's estimate is mostly sampling noise (the between-run offset from 4 runs has 3 degrees
    of freedom, and below the trial noise it is often 0), so the spread of the estimates describes
    the noise of the estimator, not how much benchmarks differ. Here every benchmark's likelihood is
    integrated over the log-normal (on a fine grid of log x, spaced ``step``: a benchmark with many
    degrees of freedom has a likelihood far narrower than any fixed quadrature's nodes), so the noise
    of each estimate is accounted for, and a benchmark whose offset hides below its trial noise says
    "small", not "zero". scipy has the pieces (the optimiser, gammaln), not this model."""
    median_x, spread, _ = lognormal_trend_ml(squares, dfs, None, known=known, step=step, spread_bounds=spread_bounds)
    return median_x, spread


def lognormal_trend_ml(
    squares: Sequence[float],
    dfs: Sequence[float],
    covariate: Sequence[float] | None,
    *,
    known: Sequence[float] | None = None,
    step: float = 0.005,
    span: float = 4.0,
    spread_bounds: tuple[float, float] | None = None,
) -> tuple[float, float, float]:
    """:func:`lognormal_ml` whose log median moves linearly with a covariate ``c_k`` (centred by the
    caller): ``log x_k ~ N(log median + slope · c_k, spread²)``. → ``(median at c = 0, spread, slope)``;
    slope 0 without a covariate. ``spread_bounds`` (no covariate): a spread outside them is put at the
    nearer bound and the median refitted for it (constrained maximum likelihood)."""
    import numpy as np
    from scipy.optimize import minimize
    from scipy.special import gammaln

    ss = np.asarray(squares, dtype=float)
    d = np.asarray(dfs, dtype=float)
    add = np.zeros_like(ss) if known is None else np.asarray(known, dtype=float)
    c = np.zeros_like(ss) if covariate is None else np.asarray(covariate, dtype=float)
    keep = (d > 0) & np.isfinite(ss) & (ss >= 0) & np.isfinite(add) & np.isfinite(c)
    ss, d, add, c = ss[keep], d[keep], add[keep], c[keep]
    if len(ss) < 3:
        raise ValueError(f"lognormal_ml: expected three or more benchmarks with a sum of squares, found {len(ss)}")
    ss = np.maximum(ss, 1e-300)
    rough = np.log(np.sqrt(np.maximum(ss / d - add, 1e-10)))
    grid = np.arange(float(rough.min()) - span, float(rough.max()) + span, step)  # log x
    v = np.exp(2 * grid)[None, :] + add[:, None]
    half = d[:, None] / 2
    # log density of each benchmark's ss at each grid point: chi²(d) of ss / v, times 1 / v
    log_f = (
        (half - 1) * np.log(ss[:, None] / v) - ss[:, None] / (2 * v) - half * math.log(2) - gammaln(half) - np.log(v)
    )
    top = log_f.max(axis=1, keepdims=True)
    like = np.exp(log_f - top)
    trend = covariate is not None

    # The search stays where the answer means something: a median on the grid, a spread between 1e-6
    # and MAX_SPREAD (three wildly different variances otherwise send Nelder-Mead's median to
    # infinity, the likelihood being flat once the spread is huge).
    lo_mu, hi_mu = float(grid[0]), float(grid[-1])
    lo_sigma, hi_sigma = math.log(1e-6), math.log(max(MAX_SPREAD, 2 * step))

    def negative_log_likelihood(theta: np.ndarray) -> float:
        mu, sigma = min(max(theta[0], lo_mu), hi_mu), math.exp(min(max(theta[1], lo_sigma), hi_sigma))
        if not trend:
            log_prior = -0.5 * ((grid - mu) / sigma) ** 2
            # Normalised in logs: a centre far off the grid (a component fitted to ~0) would underflow
            # every point to 0 and make 0/0; the prior's mass then sits at the grid's nearest edge.
            prior = np.exp(log_prior - log_prior.max())
            prior /= prior.sum()
            return -float(np.sum(top[:, 0] + np.log(np.maximum(like @ prior, 1e-300))))
        log_prior = -0.5 * ((grid[None, :] - (mu + theta[2] * c)[:, None]) / sigma) ** 2
        prior = np.exp(log_prior - log_prior.max(axis=1, keepdims=True))
        prior /= prior.sum(axis=1, keepdims=True)
        return -float(np.sum(top[:, 0] + np.log(np.maximum((like * prior).sum(axis=1), 1e-300))))

    if trend and float(np.ptp(c)) > 0:
        slope0, mu0 = np.polyfit(c, rough, 1)
        start = np.array([mu0, math.log(max(float(np.std(rough - slope0 * c)), 0.05)), slope0])
    else:
        trend = False
        start = np.array([float(np.median(rough)), math.log(max(float(np.std(rough)), 0.05))])
    start[0] = min(max(start[0], lo_mu), hi_mu)
    start[1] = min(start[1], hi_sigma - 0.5)  # inside the bounds: the likelihood is flat beyond them
    fit = minimize(
        negative_log_likelihood, start, method="Nelder-Mead", options={"xatol": 1e-5, "fatol": 1e-8, "maxiter": 4000}
    )
    mu_fit = min(max(float(fit.x[0]), lo_mu), hi_mu)
    spread = math.exp(min(max(float(fit.x[1]), lo_sigma), hi_sigma))
    if spread_bounds is not None and not spread_bounds[0] <= spread <= spread_bounds[1] and not trend:
        # Constrained maximum likelihood: the spread at its bound, the median refitted for it.
        from scipy.optimize import minimize_scalar

        spread = min(max(spread, spread_bounds[0]), spread_bounds[1])
        log_spread = math.log(spread)
        best = minimize_scalar(
            lambda mu: negative_log_likelihood(np.array([mu, log_spread])),
            bounds=(float(grid[0]), float(grid[-1])),
            method="bounded",
            options={"xatol": 1e-5},
        )
        return math.exp(float(best.x)), spread, 0.0
    return math.exp(mu_fit), spread, float(fit.x[2]) if trend else 0.0
