"""How far the machine moved between the two sides of a comparison, as each case is judged beyond it.

A whole run can be slower or faster for reasons outside the code (another machine, another day).
:func:`machine_shift` estimates that move per case from the two measures a comparison has: the
controls (a fixed computation timed in every case's workers) and the median log ratio of the other
benchmarks, and says which one it used and how far the benchmarks as a whole moved beyond the
controls (significantly more than the threshold: the code moved everything, so the controls are
used). :func:`dpbench.gate.family.judge_family` takes each case's shift out of its log ratio before
testing it (see :mod:`dpbench.gate.judge` for the model).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from dpbench.gate.judge import CONTROL_RUN_SD, MIN_OTHERS, Evidence
from dpbench.stats import median

__all__ = ["machine_shift"]


def _median_var(variances: Sequence[float]) -> float:
    """Sampling variance of a median of n log ratios of about these variances: (pi/2) v / n."""
    finite = [v for v in variances if math.isfinite(v) and v >= 0]
    return math.pi / 2 * median(finite) / len(finite) if finite else math.nan


def machine_shift(
    evs: dict[str, Evidence],
    variances: dict[str, float],
    controls: list[float],
    *,
    threshold: float,
    alpha: float,
    runs: int,
) -> tuple[dict[str, float], float, str, float]:
    """How far the machine moved, per case: ``(shift per case, its variance, basis, broad change)``.

    Two estimates of the machine's move: the controls (a fixed computation timed in every case's
    workers: their median log ratio ``c``) and the other benchmarks (the median log ratio of every
    case but this one, ``m``; a case never excuses itself). ``m`` is ~5x more precise (70 cases against
    the controls' own run offset, :data:`CONTROL_RUN_SD`), so it is used — unless the benchmarks as a
    whole moved beyond the controls by more than the threshold, significantly: then the code moved
    everything ("everything is 20% slower and the control is not": a regression of everything) and
    each case is judged against the controls. "Everything and the controls moved" is the machine.
    Fewer than :data:`MIN_OTHERS` other cases make no median: the controls, or nothing, then."""
    from scipy.special import ndtri

    names = list(evs)
    diffs = [evs[n].diff for n in names]
    c = median(controls) if controls else math.nan
    # The controls' median: its sampling variance over the cases, and the controls' own run offset.
    sampling_c = math.pi / 2 * statistics.variance(controls) / len(controls) if len(controls) >= 2 else math.nan
    own_c = 2 * CONTROL_RUN_SD**2 / max(runs, 1)
    if len(names) - 1 < MIN_OTHERS:
        if math.isfinite(sampling_c):
            return {n: c for n in names}, sampling_c + own_c, "controls", math.nan
        return {n: 0.0 for n in names}, 0.0, "none", math.nan
    var_m = _median_var(list(variances.values()))
    shift = {n: median(diffs[:i] + diffs[i + 1 :]) for i, n in enumerate(names)}
    m = median(diffs)
    if not math.isfinite(sampling_c):
        return shift, var_m, "benchmarks", math.nan
    z = (abs(m - c) - math.log1p(threshold)) / math.sqrt(var_m + sampling_c + own_c)
    if z > float(ndtri(1 - alpha)):
        # The controls' own offset was weighed once, here, against the benchmarks' common move; each
        # case then carries the controls' sampling error (a shared error would otherwise be charged
        # once per case, after Holm, against a change already shown to be beyond it).
        return {n: c for n in names}, sampling_c, "controls", m - c
    return shift, var_m, "benchmarks", m - c
