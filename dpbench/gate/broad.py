"""The job's own verdict on a move of (nearly) everything: a regression of everything, the machine, or
a disagreement the model cannot settle — and the sentence that opens the comparison's output.

Per-case verdicts say what each benchmark did beyond the machine's move; this says what the whole
comparison did, because the answer users need first differs with it: "41 of 56 cases slower while the
controls held" is a change of the code (a slower kernel, optimizer step or library: the job fails),
"everything and the controls moved" is the machine (it passes, each case judged beyond the move),
and "the benchmarks moved beyond the threshold against the controls, but not significantly" is
neither (inconclusive for the job: more trials or a paired ``dpbench ab`` settle it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from enum import Enum

from dpbench.gate.judge import MIN_OTHERS
from dpbench.gate.verdicts import BenchmarkComparison, Verdict
from dpbench.results.units import fmt_ratio
from dpbench.stats import Threshold

__all__ = ["BROAD_CUT", "Broad", "broad_judgement", "broad_pvalues"]

# A case counts towards a broad move when it moved beyond the threshold with a one-sided p below this
# (before Holm): under no change at most this share of cases does, so many more is the evidence.
BROAD_CUT = 0.05


class Broad(str, Enum):
    """The job-level judgement; saved in ``--json`` output (``family.broad``), so the strings never change."""

    NONE = "none"  # no broad move: the cases speak for themselves
    REGRESSION = "regression"  # most cases slower beyond the controls, or the reference beyond them: fails
    IMPROVEMENT = "improvement"  # the same, faster
    MACHINE = "machine"  # the controls moved beyond the threshold and the benchmarks with them
    UNSETTLED = "unsettled"  # the benchmarks moved beyond the threshold against the controls, not significantly


def broad_pvalues(
    cases: Sequence[tuple[float, float, float, float]], *, gap: float, gap_p: float, threshold: float
) -> tuple[float, float]:
    """One-sided p-values of "(nearly) everything moved" — (slower, faster) — from two tests, Bonferroni
    combined: the reference cases' median beyond the controls (``gap``, its one-sided ``gap_p``; only
    beyond the threshold), and how many cases moved beyond the threshold with p < :data:`BROAD_CUT`
    (``cases``: per case ``(p slower, p faster, excess slower, excess faster)``) against the binomial
    share that no change allows. The count sees a change of half the cases that no single case's
    test can (each case's test allows for a between-run offset that one comparison cannot rule
    out; thirty cases beyond it at once, it can)."""
    from scipy.special import bdtrc  # P(X > k) for a binomial X: scipy.stats.binom.sf without its overhead

    bar = Threshold(threshold).log_up
    n = len(cases)
    rule = Threshold(threshold)
    up = sum(1 for p, _, e, _ in cases if p < BROAD_CUT and rule.slower(e))
    down = sum(1 for _, p, _, e in cases if p < BROAD_CUT and rule.faster(e))
    count_up = float(bdtrc(up - 1, n, BROAD_CUT)) if up else 1.0
    count_down = float(bdtrc(down - 1, n, BROAD_CUT)) if down else 1.0
    gap_up = gap_p if math.isfinite(gap) and gap > bar else 1.0
    gap_down = gap_p if math.isfinite(gap) and gap < -bar else 1.0
    return min(1.0, 2 * min(gap_up, count_up)), min(1.0, 2 * min(gap_down, count_down))


def _span(ratios: Sequence[float]) -> str:
    lo, hi = fmt_ratio(min(ratios)), fmt_ratio(max(ratios))
    return lo if lo == hi else f"{lo} to {hi}"


def broad_judgement(
    tested: Sequence[BenchmarkComparison],
    *,
    control: float,
    gap: float,
    slower_adjusted: float,
    faster_adjusted: float,
    threshold: float,
    alpha: float,
    interleaved: bool = False,
    contention: str = "",
) -> tuple[Broad, str]:
    """``tested``: the cases the family tested (verdicts set); ``control``: the controls' median log move;
    ``gap``: the reference cases' median log move beyond it (NaN: not tested); ``slower_adjusted`` and
    ``faster_adjusted``: the broad tests' p-values (:func:`broad_pvalues`) after Holm with the cases'.
    ``interleaved``: the sides ran pair by pair on one machine (``--paired``), so the machine did not
    move between them: the cases are not judged beyond the controls, and a move of the controls is
    the sides' own doing. ``contention``: other processes' load during the trials, which the controls
    may have missed: a broad regression or improvement is then unsettled. → (the judgement, the
    sentence; empty for :attr:`Broad.NONE` unless the controls of interleaved sides moved)."""
    if interleaved:
        return _interleaved(
            tested,
            control=control,
            slower_adjusted=slower_adjusted,
            faster_adjusted=faster_adjusted,
            threshold=threshold,
            alpha=alpha,
        )
    broad, sentence = _unpaired(
        tested,
        control=control,
        gap=gap,
        slower_adjusted=slower_adjusted,
        faster_adjusted=faster_adjusted,
        threshold=threshold,
        alpha=alpha,
    )
    if contention and broad in (Broad.REGRESSION, Broad.IMPROVEMENT):
        return Broad.UNSETTLED, (
            f"{sentence.rsplit(': a broad ', 1)[0]}, but {contention}, which the controls may have missed: "
            "inconclusive for the job (rerun on a quiet machine, or pair the sides with dpbench ab)"
        )
    return broad, sentence


def _unpaired(
    tested: Sequence[BenchmarkComparison],
    *,
    control: float,
    gap: float,
    slower_adjusted: float,
    faster_adjusted: float,
    threshold: float,
    alpha: float,
) -> tuple[Broad, str]:
    if not math.isfinite(control) or len(tested) <= MIN_OTHERS:
        return Broad.NONE, ""
    bar = Threshold(threshold).log_up
    machine = math.exp(control)
    held = f"held ({fmt_ratio(machine)})" if abs(control) <= bar else f"moved only {fmt_ratio(machine)}"
    slower = [b.ratio / machine for b in tested if Threshold(threshold).slower(b.ratio / machine)]
    faster = [b.ratio / machine for b in tested if Threshold(threshold).faster(b.ratio / machine)]
    regressed = sum(b.verdict == Verdict.REGRESSED for b in tested)
    improved = sum(b.verdict == Verdict.IMPROVED for b in tested)
    n = len(tested)
    if slower and (slower_adjusted < alpha or 2 * regressed >= n):
        return Broad.REGRESSION, (
            f"{len(slower)} of {n} cases slower by {_span(slower)} while the controls {held}: a broad regression"
        )
    if faster and (faster_adjusted < alpha or 2 * improved >= n):
        return Broad.IMPROVEMENT, (
            f"{len(faster)} of {n} cases faster by {_span(faster)} while the controls {held}: a broad improvement"
        )
    if math.isfinite(gap) and abs(gap) > bar:
        p = slower_adjusted if gap > 0 else faster_adjusted
        return Broad.UNSETTLED, (
            f"the benchmarks moved {fmt_ratio(math.exp(control + gap))} and the controls {fmt_ratio(machine)}, "
            f"{fmt_ratio(math.exp(gap))} apart, but the controls' own session offset could explain that "
            f"(p = {p:.2g} after Holm): inconclusive for the job (more trials a side, or pair the "
            "sides with dpbench ab)"
        )
    if abs(control) > bar:
        moved = "slower" if control > 0 else "faster"
        return Broad.MACHINE, (
            f"the machine got {moved}: the controls moved {fmt_ratio(machine)} and the benchmarks with them"
            + (f" ({fmt_ratio(math.exp(control + gap))})" if math.isfinite(gap) else "")
            + "; each case is judged beyond that move"
        )
    return Broad.NONE, ""


def _interleaved(
    tested: Sequence[BenchmarkComparison],
    *,
    control: float,
    slower_adjusted: float,
    faster_adjusted: float,
    threshold: float,
    alpha: float,
) -> tuple[Broad, str]:
    bar = Threshold(threshold).log_up
    n = len(tested)
    if n <= MIN_OTHERS:
        return Broad.NONE, ""
    moved = math.isfinite(control) and abs(control) > bar
    controls = (
        f"the controls moved {fmt_ratio(math.exp(control))} too: the sides ran interleaved on one machine, so "
        "that is the sides' own doing, e.g. their environments' matmul"
        if moved
        else "the controls held" + (f" ({fmt_ratio(math.exp(control))})" if math.isfinite(control) else "")
    )
    slower = [b.ratio for b in tested if Threshold(threshold).slower(b.ratio)]
    faster = [b.ratio for b in tested if Threshold(threshold).faster(b.ratio)]
    regressed = sum(b.verdict == Verdict.REGRESSED for b in tested)
    improved = sum(b.verdict == Verdict.IMPROVED for b in tested)
    if slower and (slower_adjusted < alpha or 2 * regressed >= n):
        return Broad.REGRESSION, f"{len(slower)} of {n} cases slower by {_span(slower)}; {controls}: a broad regression"
    if faster and (faster_adjusted < alpha or 2 * improved >= n):
        return (
            Broad.IMPROVEMENT,
            f"{len(faster)} of {n} cases faster by {_span(faster)}; {controls}: a broad improvement",
        )
    if moved:
        return Broad.NONE, controls[0].upper() + controls[1:]
    return Broad.NONE, ""
