"""The reference cases of a comparison: the benchmarks that moved as the controls did, from which the
machine's move and the between-run offsets are read.

Both used to come from every case: the machine's move from the median log ratio of all the benchmarks,
the between-run offset from their scatter around it. A change that slows most cases at once then *is*
that median, and its spread *is* that scatter: the regression was read as the machine, and as noise.
The controls (a fixed computation timed in every case's workers) are what a change of the code cannot
move, so they anchor the choice (:func:`reference_cases`): the machine's move is sought within the
controls' reach, where the steadier half of the cases is densest (each spread by its own trial
spread), and the reference is the cases that agree with it. The between-run offset is fitted on every
case, or — where a group of cases lies to one side, as a change of the code puts them — on the other
side's cases, mirrored. Only the trial spread sets the first choice: it is measured within runs, where
a change of the code shows no spread, so the change under test cannot widen the choice.

Without controls, or with too few cases consistent with them to make a median, every case is the
reference (the benchmarks' median is then the only measure of the machine: a change of everything
cannot be told from a slower machine, and :func:`~dpbench.gate.machine_shift.machine_shift` says so by
its basis).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from dpbench.gate.judge import MIN_OTHERS, Evidence, Prior, between_run_variance, fit_between
from dpbench.stats import median

__all__ = ["REFERENCE_Z", "Reference", "reference_cases"]

# sds: how far from the controls' move a case may lie and still tell the machine's move (two-sided 1%).
# The window's width is mostly the controls' own error (~6% for one run a side), so a case slowed by
# 25% or more falls outside it unless its own trials are very noisy; chosen by scripts/simulate_gate.py
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
) -> float:
    """The move in [lo, hi] where the cases' log ratios are densest, each spread by its own trial
    spread (a mixture of normals; a mode, so a group of changed cases elsewhere does not pull it, and a
    steady case weighs more than a noisy one, which could agree with two moves far apart)."""
    import numpy as np

    diffs = np.array([evs[n].diff for n in names])
    sd = np.sqrt(np.array([var[n] for n in names]) + SMOOTHING**2)
    grid = np.arange(lo, hi + GRID_STEP / 2, GRID_STEP) if hi > lo else np.array([lo])
    z = (diffs[None, :] - grid[:, None]) / sd[None, :]
    density = (np.exp(-0.5 * z * z) / sd[None, :]).sum(axis=1)
    return float(grid[int(np.argmax(density))])


def reference_cases(
    evs: Mapping[str, Evidence],
    trial_var: Mapping[str, float],
    *,
    control: float,
    control_var: float,
    fit_between_runs: bool,
) -> Reference:
    """The reference cases given each case's evidence, its expected trial variance of the log ratio
    (``trial_var``), the controls' log move ``control`` and that estimate's variance ``control_var``
    (NaN: no controls). ``fit_between_runs``: one run of several trials a side, whose between-run
    offset the comparison must fit (the other designs' samples span sessions already).

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
