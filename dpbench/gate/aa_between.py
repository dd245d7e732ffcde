"""Each case's between-run offset measured by the baseline's own sessions (``dpbench compare --aa``).

One comparison of one run a side can only fit the typical case's between-run offset; runs of the
baseline's commit beside it (its own runs and the ``--aa`` runs) measure each case's, which
:func:`dpbench.gate.family.judge_family` then uses per case (see :mod:`dpbench.gate.judge`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from dpbench.gate.judge import (
    BETWEEN_MIN_SD,
    BETWEEN_SPREAD_FLOOR,
    BETWEEN_SPREAD_MAX,
    Pooled,
    Posterior,
    Prior,
    lognormal_ml,
    posterior,
    posterior_variance,
    within_run_variance,
)

__all__ = ["BETWEEN_GRID_STEP", "aa_between"]

BETWEEN_GRID_STEP = 0.05  # log sd: the grid of each case's between-run posterior from --aa runs


def aa_between(
    prior: Prior, base: dict[str, Pooled], aa: Sequence[dict[str, Pooled]]
) -> tuple[Prior, dict[str, Posterior]]:
    """Each case's between-run variance measured by the baseline's own sessions (its runs and the
    ``--aa`` runs, all of one commit): per case, the scatter of its run means (each run's common move,
    the median over cases, taken out) beyond what its trials explain; across cases a log-normal
    (:func:`lognormal_ml`), and each case's posterior given its own scatter. → (the log-normal, the
    posteriors); no prior (NaN) with fewer than two sessions or three cases."""
    import numpy as np

    names = [n for n in base if all(n in other for other in aa)]
    per_case: dict[str, list[list[float]]] = {}
    for n in names:
        runs = [r for r in base[n].runs] + [r for other in aa for r in other[n].runs]
        if len(runs) >= 2 and all(len(r) >= 1 and min(r) > 0 for r in runs):
            per_case[n] = [[math.log(t) for t in r] for r in runs]
    sizes = {len(v) for v in per_case.values()}
    if len(per_case) < 3 or len(sizes) != 1:
        return Prior(sd=math.nan, spread=math.nan), {}
    names = list(per_case)
    means = np.array([[statistics.fmean(r) for r in per_case[n]] for n in names])  # cases × sessions
    means -= np.median(means - means[:, :1], axis=0)[None, :]  # each session's common move
    dev = means - means.mean(axis=1, keepdims=True)
    sessions_n = means.shape[1]
    ss, known = [], []
    for k, n in enumerate(names):
        runs = per_case[n]
        df_w = sum(len(r) - 1 for r in runs)
        level = statistics.fmean(x for r in runs for x in r)
        v = posterior_variance(within_run_variance(runs), df_w, prior, level) if df_w > 0 else math.nan
        ss.append(float(np.sum(dev[k] ** 2)))
        known.append(v * statistics.fmean(1 / len(r) for r in runs) if math.isfinite(v) else 0.0)
    df = sessions_n - 1
    # Bounded as the comparison's own fit is (judge.fit_between): a few degrees of freedom per case tell the
    # typical offset far better than how unequal the cases are.
    sd, spread = lognormal_ml(
        ss, [df] * len(ss), known, step=0.02, spread_bounds=(BETWEEN_SPREAD_FLOOR, BETWEEN_SPREAD_MAX)
    )
    fitted = Prior(sd=max(sd, BETWEEN_MIN_SD), spread=spread)
    # A coarser grid than the trial spread's: these posteriors are wide (a few degrees of freedom each).
    return fitted, {
        n: posterior(ss[k] / df, df, fitted, known=known[k], step=BETWEEN_GRID_STEP) for k, n in enumerate(names)
    }
