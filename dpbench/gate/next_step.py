"""What to do about an inconclusive verdict: the cheapest measurement that would settle it.

The gate's test (:mod:`dpbench.gate.family`) weighs a case's log change against a variance of two
parts, both kept on the verdict: ``trial_var`` (one log trial's spread, as the moderated posterior
has it) times ``1/n_baseline + 1/n_candidate``, which more trials shrink, and ``fixed_var`` (the
between-run offset a fresh session adds and the uncertainty of the machine's shift), which more trials
of one run never shrink. The plan is the normal approximation of that test: the trials a side at
which the change seen (beyond the machine) would be significant at Holm's strictest step
(``alpha / cases``) with :data:`POWER` — a planning figure, not a promise: the test itself averages
over the variance's posterior and the machine's move is measured afresh. Where the fixed part
alone is too wide, no number of trials helps. Its between-run share (``session_var``: how far a
fresh session moves the case) averages out over fresh sessions, so the step is then the runs a side
that would settle it (:data:`MAX_RUNS` at most); failing that, to measure that part (``--aa``) or to
cancel it (``dpbench ab`` pairs base and head trial by trial).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

from dpbench.gate.judge import MIN_TRIALS
from dpbench.gate.verdicts import BenchmarkComparison, Verdict
from dpbench.results.units import fmt_ratio
from dpbench.stats import Threshold

__all__ = ["LEGEND", "MAX_TRIALS", "POWER", "NextStep", "next_step", "plan"]

POWER = 0.8  # the chance the planned run shows a change as large as the one seen (if it is real)
MAX_TRIALS = 50  # trials a side beyond which a rerun is no cheap step: measure or cancel the offset instead
MAX_RUNS = 10  # runs a side beyond which more sessions are no cheap step either

_MEASURE_OR_PAIR = "measure its own move with --aa runs of the baseline, or pair the sides with `dpbench ab BASE HEAD`"


# What each kind of step means, said once under the table (the rows carry the short form).
LEGEND = {
    "trials": "N trials a side: rerun both sides with pytest --dpbench-trials N, which would show the change seen "
    f"at alpha/cases with {POWER:.0%} power (the normal approximation of the gate's test)",
    "runs": "N runs a side: a fresh session alone moves the case more than more trials of one run can outweigh; "
    "N sessions a side (pytest --benchmark-save=NAME, N times each) compared with `dpbench compare --baseline "
    "RUN... --candidate RUN...` average that move out, and would show the change seen at alpha/cases with "
    f"{POWER:.0%} power (the normal approximation of the gate's test); or {_MEASURE_OR_PAIR}",
    "aa-or-ab": "--aa or ab (±x%): a fresh session alone moves the case ±x%, so more trials of one run cannot "
    f"settle it; {_MEASURE_OR_PAIR}",
    "ab-after-aa": "ab (±x%): even as the --aa runs measured it, a fresh session moves the case ±x%: pair the "
    "sides with `dpbench ab BASE HEAD`",
    "ab-shift": "ab (shift ±x%): the machine's move between the runs, taken out of every case, is itself known "
    "only to ±x% (from the cases it was measured on), more than the change can be told from: more trials or "
    "runs of one side cannot settle it; pair the sides with `dpbench ab BASE HEAD`, where the move cancels",
    "ab": "ab: the machine moved: the change is the machine's, not (only) the code's; measure both sides in one "
    "job with `dpbench ab BASE HEAD`, where each pair's drift cancels",
    "pairs": "N pairs: rerun the paired job with dpbench ab --trials N, which would show the change seen at "
    f"alpha/cases with {POWER:.0%} power (the normal approximation of the gate's test)",
    "two-trials": f"≥ {MIN_TRIALS} trials a side: one trial a side has no spread to test against; rerun with "
    "pytest --dpbench-trials N",
}


@dataclass(frozen=True, kw_only=True)
class NextStep:
    """The plan for one inconclusive case."""

    kind: str
    """``trials`` (rerun with more trials), ``pairs`` (rerun dpbench ab with more pairs),
    ``runs`` (more fresh sessions a side), ``aa-or-ab`` (the between-run offset dominates),
    ``ab-shift`` (the uncertainty of the machine's move dominates),
    ``ab`` (the machine moved), ``two-trials`` (fewer than two trials a side)"""
    short: str
    """the table's cell: ``9 trials a side``, ``--aa or ab (±13%)``, ``ab: the machine moved``"""
    text: str
    """the whole sentence, with this case's numbers"""
    count: int | None = None
    """``trials``, ``pairs`` and ``runs``: the trials a side, pairs or runs a side in all the plan asks
    for (None for the other kinds); ``dpbench ab`` measures its open cases to its pairs"""


def _machine_moved(b: BenchmarkComparison) -> bool:
    """Beyond the threshold as measured, not beyond it once the machine's move is taken out: the
    machine made the change (the gate's own "the machine changed" case, family._verdict)."""
    if not math.isfinite(b.excess):
        return False
    rule = Threshold(b.threshold)
    return (rule.slower(b.ratio) and not rule.slower(b.excess)) or (rule.faster(b.ratio) and not rule.faster(b.excess))


def plan(b: BenchmarkComparison, *, alpha: float, family_size: int, method: str, aa: bool = False) -> NextStep | None:
    """The cheapest next step for an inconclusive case (None for any other verdict, or where no plan
    applies); ``aa``: the comparison already measured each case's move with --aa runs, so only pairing is left."""
    if b.verdict != Verdict.INCONCLUSIVE:
        return None
    paired = method == "paired"
    if not paired and min(b.baseline_trials, b.candidate_trials) < MIN_TRIALS:
        return NextStep(
            kind="two-trials",
            short=f"≥ {MIN_TRIALS} trials a side",
            text=f"rerun each side with ≥ {MIN_TRIALS} trials (pytest --dpbench-trials N): "
            "one trial a side has no spread to test against",
        )
    if not (math.isfinite(b.ratio) and b.ratio > 0):
        return None
    if _machine_moved(b):
        return NextStep(
            kind="ab",
            short="ab: the machine moved",
            text="the machine moved between the runs, not (only) the code: measure both sides in one job "
            "with `dpbench ab BASE HEAD`, where each pair's drift cancels",
        )
    if not (math.isfinite(b.trial_var) and math.isfinite(b.fixed_var) and math.isfinite(b.excess) and b.excess > 0):
        return None
    change = abs(math.log(b.excess))
    z = NormalDist().inv_cdf(1 - alpha / max(family_size, 1)) + NormalDist().inv_cdf(POWER)
    budget = (change / z) ** 2  # the variance of the log change at which it would be found
    seen = f"a {fmt_ratio(b.excess)} change"
    spread = f"±{math.expm1(math.sqrt(b.fixed_var)):.0%}"
    if b.fixed_var >= budget and aa:
        return NextStep(
            kind="ab-after-aa",
            short=f"ab ({spread})",
            text=f"more trials cannot settle {seen}: even as the --aa runs measured it, a fresh session moves it "
            f"{spread}; pair the sides with `dpbench ab BASE HEAD`",
        )
    if b.fixed_var >= budget:
        return (
            _runs(b, budget)
            or _shift(b, seen)
            or NextStep(
                kind="aa-or-ab",
                short=f"--aa or ab ({spread})",
                text=f"more trials cannot settle {seen}: a fresh session alone moves it {spread}; {_MEASURE_OR_PAIR}",
            )
        )
    # var = trial_var · (1/n + 1/n) + fixed (n trials a side) — or trial_var / n + fixed for n pairs
    per_side = (1 if paired else 2) * b.trial_var / (budget - b.fixed_var)
    have = b.pairs if paired else max(b.baseline_trials, b.candidate_trials)
    # At least one more: the plan's normal tail is lighter than the test's posterior-averaged one.
    needed = max(math.ceil(per_side), MIN_TRIALS, have + 1)
    if needed > MAX_TRIALS and paired:  # already paired: only more pairs would tell, and too many
        return NextStep(
            kind="pairs",
            short=f"{needed} pairs",
            count=needed,
            text=f"{needed} pairs would be needed to settle {seen}: too small a change for these cases' spread",
        )
    if needed > MAX_TRIALS:
        return _runs(b, budget) or NextStep(
            kind="aa-or-ab",
            short=f"--aa or ab ({needed} trials)",
            text=f"{needed} trials a side would be needed to settle {seen}; {_MEASURE_OR_PAIR}",
        )
    power = f"would show {seen} at α/{family_size} with {POWER:.0%} power"
    if paired:
        return NextStep(
            kind="pairs",
            short=f"{needed} pairs",
            count=needed,
            text=f"{needed} pairs ({needed - have} more; dpbench ab --trials {needed}) {power}",
        )
    return NextStep(
        kind="trials",
        short=f"{needed} trials a side",
        count=needed,
        text=f"{needed} trials a side ({needed - have} more; pytest --dpbench-trials {needed}) {power}",
    )


def _runs(b: BenchmarkComparison, budget: float) -> NextStep | None:
    """Fresh sessions a side, each of this run's trials: R of them divide the trials' share and the
    between-run share (``session_var``) by R / the runs now; the machine's share is kept as it is
    (measured afresh over more runs it shrinks too: the plan errs long). None without the parts, or
    beyond :data:`MAX_RUNS`."""
    have = b.runs
    if not (have >= 1 and math.isfinite(b.session_var) and b.session_var > 0):
        return None
    shift = max(b.fixed_var - b.session_var, 0.0)
    if shift >= budget:
        return None
    per_runs = b.trial_var * (1 / b.baseline_trials + 1 / b.candidate_trials) + b.session_var  # at `have` runs
    needed = max(math.ceil(have * per_runs / (budget - shift)), have + 1)
    if needed > MAX_RUNS:
        return None
    return NextStep(
        kind="runs",
        short=f"{needed} runs a side",
        count=needed,
        text=f"{needed} runs a side ({needed - have} more of each: fresh sessions, whose own moves average out, "
        f"where more trials of one run cannot) would show a {fmt_ratio(b.excess)} change at α/cases with "
        f"{POWER:.0%} power; or {_MEASURE_OR_PAIR}",
    )


def _shift(b: BenchmarkComparison, seen: str) -> NextStep | None:
    """Where the uncertainty of the machine's move, not a fresh session's own, is most of ``fixed_var``:
    --aa runs measure each case's session move, which is not what is wide, so only pairing helps.
    None where the between-run share is unknown or the larger one."""
    if not math.isfinite(b.session_var):
        return None
    shift = b.fixed_var - b.session_var
    if shift <= b.session_var:
        return None
    spread = f"±{math.expm1(math.sqrt(shift)):.0%}"
    return NextStep(
        kind="ab-shift",
        short=f"ab (shift {spread})",
        text=f"more trials cannot settle {seen}: the machine's move between the runs, taken out of every case, is "
        f"known only to {spread}; pair the sides with `dpbench ab BASE HEAD`, where the move cancels",
    )


def next_step(b: BenchmarkComparison, *, alpha: float, family_size: int, method: str, aa: bool = False) -> str:
    """The plan's sentence ('' where there is none)."""
    found = plan(b, alpha=alpha, family_size=family_size, method=method, aa=aa)
    return found.text if found is not None else ""
