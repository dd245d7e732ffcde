"""Maximum-likelihood fits of a log-normal spread across benchmarks, from each benchmark's noisy
chi-square estimate: the gate's trial-variance prior (:func:`dpbench.gate.judge.fit_prior`), its
between-run offsets and the noise model of :mod:`dpbench.gate.simulation` use them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

__all__ = ["MAX_SPREAD", "lognormal_ml", "lognormal_trend_ml"]

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
