"""How far the machine moved between the two sides of a comparison, as each case is judged beyond it.

A whole run can be slower or faster for reasons outside the code (another machine, another day).
:func:`machine_shift` estimates that move per case from the two measures a comparison has: the
controls (a fixed computation timed in every case's workers) and the median log ratio of the
reference cases (:mod:`dpbench.gate.machine`: the benchmarks that moved as the controls did), and
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

from dpbench.gate.judge import (
    BETWEEN_MIN_SD,
    BETWEEN_SPREAD_FLOOR,
    BETWEEN_SPREAD_MAX,
    CONTROL_RUN_SD,
    MIN_OTHERS,
    Evidence,
    Pooled,
    Posterior,
    Prior,
    between_run_variance,
    fit_between,
    lognormal_ml,
    posterior,
    posterior_variance,
    within_run_variance,
)
from dpbench.stats import Threshold, median

__all__ = [
    "BETWEEN_GRID_STEP",
    "MachineMove",
    "REFERENCE_Z",
    "Reference",
    "aa_between",
    "control_move",
    "machine_shift",
    "median_variance",
    "reference_cases",
]


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
    if p < alpha and abs(gap) > Threshold(threshold).log_up:
        # The controls' own offset was weighed once, here, against the reference's common move; each
        # case then carries the controls' sampling error (a shared error would otherwise be charged
        # once per case, after Holm, against a move already shown to be beyond it).
        return MachineMove(shift={n: c for n in names}, shift_var=sampling_c, basis="controls", gap=gap, gap_p=p)
    return MachineMove(shift=shift, shift_var=var_m, basis="benchmarks", gap=gap, gap_p=p)


# The reference cases of a comparison: the benchmarks that moved as the controls did, from which the
# machine's move and the between-run offsets are read.
#
# Both used to come from every case: the machine's move from the median log ratio of all the benchmarks,
# the between-run offset from their scatter around it. A change that slows most cases at once then *is*
# that median, and its spread *is* that scatter: the regression was read as the machine, and as noise.
# The controls (a fixed computation timed in every case's workers) are what a change of the code cannot
# move, so they anchor the choice (:func:`reference_cases`): the machine's move is sought within the
# controls' reach, where the steadier half of the cases is densest (each spread by its own trial
# spread), and the reference is the cases that agree with it. The between-run offset is fitted on every
# case, or — where a group of cases lies to one side, as a change of the code puts them — on the other
# side's cases, mirrored. Only the trial spread sets the first choice: it is measured within runs, where
# a change of the code shows no spread, so the change under test cannot widen the choice.
#
# Without controls, or with too few cases consistent with them to make a median, every case is the
# reference (the benchmarks' median is then the only measure of the machine: a change of everything
# cannot be told from a slower machine, and :func:`~dpbench.gate.machine.machine_shift` says so by
# its basis).
# sds: how far from the controls' move a case may lie and still tell the machine's move (two-sided 1%).
# The window's width is mostly the controls' own error (~6% for one run a side), so a case slowed by
# 25% or more falls outside it unless its own trials are very noisy; chosen by python -m validation.simulate_gate
# (the broad-change scenarios and the A/A jobs).
REFERENCE_Z = 2.576
# sds: the window's edge left out on the side of a group of changed cases (see reference_cases).
CHOICE_Z = 2.0
GROUP_SHARE = 0.5
# A group: at least this share of the cases outside the window (a few changed cases the fit's own screen
# and its 90th-percentile match leave out; the mirrored fit, on half the cases, would cost them power).
GROUP_MIN = 0.2  # a group: the cases outside the window lean this far to one side ((right − left) / all)
SMOOTHING = 0.01  # log: the least spread a case's density is given (a case without trial spread is no spike)
GRID_STEP = 0.001  # log: where the densest move is sought


@dataclass(frozen=True, kw_only=True)
class Reference:
    """The cases that tell the machine's move, and what they say."""

    names: tuple[str, ...]  # in the evidence's order
    centre: float  # their median log ratio
    between: Prior  # the between-run offset fitted from their scatter (sd 0: none fitted or needed)
    anchored: bool  # chosen around the controls (False: every case, for want of controls or of agreement)


def _finite(value: float) -> float:
    return value if math.isfinite(value) and value > 0 else 0.0


def _fit(
    names: tuple[str, ...], evs: Mapping[str, Evidence], trial_var: Mapping[str, float], fit: bool
) -> tuple[float, Prior]:
    centre = median([evs[n].diff for n in names])
    if not fit:
        return centre, Prior(sd=0.0, spread=0.0)
    within = [_finite(trial_var[n]) for n in names]
    return centre, fit_between([evs[n].diff - centre for n in names], within, [evs[n].b for n in names])


def _agree(
    names: tuple[str, ...],
    evs: Mapping[str, Evidence],
    var: Mapping[str, float],
    move: float,
    z: float = REFERENCE_Z,
) -> tuple[str, ...]:
    """The cases whose log ratio lies within ``z`` standard deviations (``var``) of ``move``."""
    return tuple(n for n in names if abs(evs[n].diff - move) <= z * math.sqrt(var[n]))


def _densest(
    names: tuple[str, ...], evs: Mapping[str, Evidence], var: Mapping[str, float], lo: float, hi: float
) -> float | None:
    """The move in [lo, hi] where the cases' log ratios are densest, each spread by its own trial
    spread (a mixture of normals; a mode, so a group of changed cases elsewhere does not pull it, and a
    steady case weighs more than a noisy one, which could agree with two moves far apart).

    A mode, not the window's highest point: None when the density has no peak inside the window. A
    density still rising at the window's edge peaks beyond it, at cases that moved further than the
    controls allow — a changed group, not the machine (taking the edge for the move let such a group
    into the reference, and its scatter into the between-run offset)."""
    import numpy as np

    diffs = np.array([evs[n].diff for n in names])
    sd = np.sqrt(np.array([var[n] for n in names]) + SMOOTHING**2)
    inner = np.arange(lo, hi + GRID_STEP / 2, GRID_STEP) if hi > lo else np.array([lo])
    grid = np.concatenate([[inner[0] - GRID_STEP], inner, [inner[-1] + GRID_STEP]])
    z = (diffs[None, :] - grid[:, None]) / sd[None, :]
    density = (np.exp(-0.5 * z * z) / sd[None, :]).sum(axis=1)
    peak = (density[1:-1] >= density[:-2]) & (density[1:-1] >= density[2:])
    if not peak.any():
        return None
    best = int(np.argmax(np.where(peak, density[1:-1], -np.inf)))
    return float(inner[best])


def reference_cases(
    evs: Mapping[str, Evidence],
    trial_var: Mapping[str, float],
    *,
    control: float,
    control_var: float,
    fit_between_runs: bool,
    threshold: float,
) -> Reference:
    """The reference cases given each case's evidence, its expected trial variance of the log ratio
    (``trial_var``), the controls' log move ``control`` and that estimate's variance ``control_var``
    (NaN: no controls). ``fit_between_runs``: one run of several trials a side, whose between-run
    offset the comparison must fit (the other designs' samples span sessions already). ``threshold``:
    the gate's (a reference whose median lies that far from the move is no reference).

    Where the machine moved, the cases the code did not change agree with one another by their own
    trial spread, and that move lies within the controls' reach (:data:`REFERENCE_Z` of their whole
    error: their sampling spread and their own session offset). So: the move within the controls'
    reach where the cases are densest (:func:`_densest`), the cases that agree with it, and the
    between-run offset fitted on them, around their median. The trial spread, which a change of the
    code does not widen, sets the first choice; the offset that widens it is a median match."""
    everyone = tuple(evs)
    if not (math.isfinite(control) and math.isfinite(control_var)) or len(everyone) <= MIN_OTHERS:
        centre, between = _fit(everyone, evs, trial_var, fit_between_runs)
        return Reference(names=everyone, centre=centre, between=between, anchored=False)
    var = {n: _finite(trial_var[n]) for n in everyone}
    reach = REFERENCE_Z * math.sqrt(control_var)
    # The steadier half finds the move: 25% or 50% apart, a noisy case could agree with either group,
    # and the noisy cases of a changed group lean the density of all the cases towards it.
    steady = tuple(sorted(everyone, key=lambda n: var[n])[: max(len(everyone) // 2, MIN_OTHERS + 1)])
    move = _densest(steady, evs, var, control - reach, control + reach)
    if move is None:  # the steady half is a changed group beyond the controls' reach: every case then
        move = _densest(everyone, evs, var, control - reach, control + reach)
    if move is None:  # no cases gather at any move the controls allow: nothing tells the machine but them
        centre, between = _fit(everyone, evs, trial_var, fit_between_runs)
        return Reference(names=everyone, centre=centre, between=between, anchored=False)
    near = _agree(everyone, evs, {n: var[n] + control_var for n in everyone}, move)
    # The typical between-run offset of the cases near that move: a median match, which the changed cases
    # the controls' wide reach lets in (fewer than half) cannot move; then every case that agrees with
    # the move by its trial spread, that offset and the move's own sampling error.
    typical = (
        between_run_variance(
            [evs[n].diff - move for n in near], [var[n] for n in near], [evs[n].b for n in near], quantile=0.5
        )
        if fit_between_runs and len(near) >= 3
        else 0.0
    )
    spread = {n: var[n] + typical * evs[n].b for n in everyone}
    move_var = math.pi / 2 * median([spread[n] for n in near]) / len(near) if near else 0.0
    wide = {n: v + move_var for n, v in spread.items()}
    chosen = _agree(everyone, evs, wide, move)
    if chosen and abs(median([evs[n].diff for n in chosen]) - move) > Threshold(threshold).log_up:
        # Cases that moved as the machine did cannot have their median a threshold away from the move
        # they were chosen around: the typical offset let a changed group's near side in (in simulated
        # half-slowed suites the reference then ran away to most of the cases, and the offset fitted
        # over them hid the change; in simulated A/A jobs that median stays within 0.05 of the move).
        # The trial spread alone chooses then, which a change of the code does not widen.
        chosen = _agree(everyone, evs, {n: var[n] + move_var for n in everyone}, move)
    # The between-run offset is fitted on every case (fit_between screens out the far ones itself): its
    # estimate rests on the few cases a session moved most, and a narrower choice that cut them would take
    # the typical offset for far smaller than it is.
    fitted = everyone
    mirrored = False
    # But a group of changed cases lying to one side of the move (GROUP_MIN of the cases, and more than
    # MIN_OTHERS, outside the window, leaning GROUP_SHARE to that side) would set the offsets' upper tail
    # with its noisy cases, 2-3 of their sds away for a 25-50% change (the fit matches that tail at its
    # 90th percentile). The
    # offsets are symmetric about the move, and a change moves cases to one side only: so the fit takes the
    # other side's cases, each twice (mirrored), and the reference leaves out the window's edge (beyond
    # CHOICE_Z) on the group's side. With no such group (an A/A comparison), nothing is left out.
    outside = [evs[n].diff - move for n in everyone if n not in chosen]
    side = sum(1 if d > 0 else -1 for d in outside)
    if len(outside) >= max(MIN_OTHERS + 1, GROUP_MIN * len(everyone)) and abs(side) >= GROUP_SHARE * len(outside):
        inner = set(_agree(everyone, evs, wide, move, z=CHOICE_Z))
        chosen = tuple(n for n in chosen if n in inner or (evs[n].diff - move) * side < 0)
        fitted = tuple(n for n in everyone if (evs[n].diff - move) * side <= 0)
        mirrored = True
    if len(chosen) <= MIN_OTHERS:  # too few agree with any move the controls allow to make a median
        centre, between = _fit(everyone, evs, trial_var, fit_between_runs)
        return Reference(names=everyone, centre=centre, between=between, anchored=False)
    centre = median([evs[n].diff for n in chosen])
    # Fitted once: a refit that chose again by the fitted offset would let in the noisy changed cases a
    # wider window reaches, whose scatter widens the offset that chose them (it ran away to every case in
    # simulated broad changes).
    residuals = [evs[n].diff - (move if mirrored else centre) for n in fitted]
    within, weights = [var[n] for n in fitted], [evs[n].b for n in fitted]
    if mirrored:
        residuals, within, weights = residuals + [-r for r in residuals], within * 2, weights * 2
    between = fit_between(residuals, within, weights) if fit_between_runs else Prior(sd=0.0, spread=0.0)
    return Reference(names=chosen, centre=centre, between=between, anchored=True)


# Each case's between-run offset measured by the baseline's own sessions (``dpbench compare --aa``).
#
# One comparison of one run a side can only fit the typical case's between-run offset; runs of the
# baseline's commit beside it (its own runs and the ``--aa`` runs) measure each case's, which
# :func:`dpbench.gate.family.judge_family` then uses per case (see :mod:`dpbench.gate.judge`).
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
