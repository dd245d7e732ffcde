"""How far the machine moved between the two sides of a comparison, as each case is judged beyond it.

A whole run can be slower or faster for reasons outside the code (another machine, another day).
:func:`machine_shift` estimates that move per case from the two measures a comparison has: the
controls (a fixed computation timed in every case's workers) and the median log ratio of the
reference cases (:mod:`dpbench.gate.reference`: the benchmarks that moved as the controls did), and
tests once whether the reference as a whole moved beyond the controls (the *broad* test: the code moved
everything, so the controls are the machine). :func:`dpbench.gate.family.judge_family` takes each
case's shift out of its log ratio before testing it (see :mod:`dpbench.gate.judge` for the model) and
puts the broad test's p-value in the same Holm family as the cases'.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dpbench.gate.judge import CONTROL_RUN_SD, MIN_OTHERS, Evidence, Posterior
from dpbench.gate.reference import Reference
from dpbench.stats import median

__all__ = ["MachineMove", "control_move", "machine_shift", "median_variance"]


@dataclass(frozen=True, kw_only=True)
class MachineMove:
    shift: dict[str, float]  # per case: the log move of the machine it is judged beyond
    shift_var: float  # that estimate's variance, added to every case's
    basis: str  # "benchmarks" (the reference's median), "controls" or "none"
    # The reference's median log move beyond the controls' (NaN without controls or without enough cases),
    # and the one-sided p of "no move beyond the controls" in its direction: the broad test.
    gap: float = math.nan
    gap_p: float = math.nan


def control_move(controls: Sequence[float], runs: int) -> tuple[float, float, float]:
    """The controls' median log ratio, its sampling variance over the cases and the controls' own run
    offset's variance (:data:`CONTROL_RUN_SD` per side, ``runs`` runs a side). NaN without controls."""
    if len(controls) < 2:
        return (median(controls) if controls else math.nan), math.nan, math.nan
    sampling = math.pi / 2 * statistics.variance(controls) / len(controls)
    return median(controls), sampling, 2 * CONTROL_RUN_SD**2 / max(runs, 1)


def median_variance(spreads: Sequence[Posterior]) -> float:
    """Sampling variance of the median of log ratios whose variances are drawn from ``spreads`` (one
    distribution per case: its trial part plus its between-run offset's), about their common centre:
    1 / (4 n f(0)²), f(0) the mixture's density there — the normal mixture's mean of 1/√(2πv).

    Why not (π/2)·v/n with the mean variance: the between-run offset is log-normal across cases with a
    heavy tail, whose mean variance the few wide cases dominate; the median's precision rests on the
    density at the centre, which the steady cases make."""
    import numpy as np

    if not spreads:
        return math.nan
    density = statistics.fmean(
        float(np.sum(s.weights / np.sqrt(2 * math.pi * np.maximum(s.variances, 1e-300)))) for s in spreads
    )
    return 1 / (4 * len(spreads) * density * density)


def machine_shift(
    evs: Mapping[str, Evidence],
    spreads: Mapping[str, Posterior],
    reference: Reference,
    controls: list[float],
    *,
    threshold: float,
    alpha: float,
    runs: int,
) -> MachineMove:
    """How far the machine moved, per case.

    Two estimates of the machine's move: the controls (their median log ratio ``c``, which carries
    their own run offset) and the reference cases (their median ``m``: every reference case but the one
    judged, a case never excusing itself; a case outside the reference is judged beyond all of it). ``m``
    is the more precise and is used — unless the reference as a whole moved beyond the controls by more
    than the threshold, significantly (``p < alpha``, against no move, with ``m``'s sampling variance
    and the controls' whole error): then the code moved everything and each case is judged beyond the
    controls. "Everything and the controls moved" is the machine. Fewer than :data:`MIN_OTHERS` other
    cases make no median: the controls, or nothing, then."""
    from scipy.special import ndtr

    names = list(evs)
    c, sampling_c, own_c = control_move(controls, runs)
    if len(names) - 1 < MIN_OTHERS:
        if math.isfinite(sampling_c):
            return MachineMove(shift={n: c for n in names}, shift_var=sampling_c + own_c, basis="controls")
        return MachineMove(shift={n: 0.0 for n in names}, shift_var=0.0, basis="none")
    ref = [n for n in reference.names if n in evs]
    diffs = {n: evs[n].diff for n in ref}
    m = median(list(diffs.values()))
    shift = {n: (median([d for k, d in diffs.items() if k != n]) if n in diffs else m) for n in names}
    var_m = median_variance([spreads[n] for n in ref])
    if not math.isfinite(sampling_c):
        return MachineMove(shift=shift, shift_var=var_m, basis="benchmarks")
    gap = m - c
    p = float(ndtr(-abs(gap) / math.sqrt(var_m + sampling_c + own_c)))
    if p < alpha and abs(gap) > math.log1p(threshold):
        # The controls' own offset was weighed once, here, against the reference's common move; each
        # case then carries the controls' sampling error (a shared error would otherwise be charged
        # once per case, after Holm, against a move already shown to be beyond it).
        return MachineMove(shift={n: c for n in names}, shift_var=sampling_c, basis="controls", gap=gap, gap_p=p)
    return MachineMove(shift=shift, shift_var=var_m, basis="benchmarks", gap=gap, gap_p=p)
