"""``dpbench ab`` measures until its verdicts are settled: after the first ``--trials`` ABBA rounds the
pairs are judged (a *look*), and only the cases still ``inconclusive`` get more rounds, until none is,
or ``--max-trials`` pairs, or the ``--budget`` is spent. An "inconclusive" then means "measure more",
so a broad regression names its cases instead of only failing the job.

The gate states one family-wise false-alarm rate per job (``--alpha``, 1%). Every look is a chance
for a case that did not change to cross the line, so the looks share it: a job plans at most
:data:`LOOKS` looks, and every look — the last one, the verdict, included — judges the whole job at
``alpha / looks`` (Bonferroni over the looks, Holm over the cases within each). A case that stops at
any look has its final p-value from one of the looks, so the chance that any unchanged case is
called ``regressed`` in any of them is at most ``looks × alpha / looks``, whatever the stopping rule
does (``python -m validation.simulate_ab_settle`` checks this with the gate's noise model, the looks placed by
the estimates below). The price is a stricter first look; a job that cannot look twice
(``--max-trials`` equal to ``--trials``) keeps the whole ``alpha``.

Where the next look falls: the gate's next-step estimate (:mod:`dpbench.gate.next_step`: the pairs
at which the change seen would be significant) of the open case that needs the most, at least one
more round, never beyond ``--max-trials``; the last planned look is at ``--max-trials``.

This module holds the plan and the loop; the job (:mod:`dpbench.ab.job`) runs the rounds and the
command line hands in the look (the gate's comparison, in this process): ab computes no statistic.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dpbench.ab.revisions import ABError
from dpbench.measure.settings import duration_text, parse_count
from dpbench.measure.settings import parse_budget as parse_duration

__all__ = [
    "LOOKS",
    "PairsLook",
    "LookResult",
    "OpenCase",
    "SettleOutcome",
    "SettlePlan",
    "end_line",
    "next_target",
    "parse_budget",
    "parse_max_trials",
    "until_settled",
]

LOOKS = 3  # the most looks a job plans: each judges at alpha / LOOKS (see the module's docstring)
MAX_TRIALS_FACTOR = 3  # --max-trials by default: this many times --trials


def parse_budget(raw: str | None) -> float | None:
    """``--budget``: ``90s``, ``10m``, ``1h`` → seconds (None: no budget), by the suites' rule
    (:func:`dpbench.measure.settings.parse_budget`), refused as ab's input."""
    if raw is None:
        return None
    try:
        return parse_duration("--budget", raw, forms="90s, 10m or 1h")
    except ValueError as exc:
        raise ABError(str(exc)) from None


def parse_max_trials(raw: str | None, *, trials: int, min_pairs: int) -> int:
    """``--max-trials``: pairs a case may get in all (None: :data:`MAX_TRIALS_FACTOR` × ``trials``); at
    least ``trials`` (the first rounds always run) and the gate's minimum pairs."""
    if raw is None:
        return max(MAX_TRIALS_FACTOR * trials, min_pairs)
    try:
        value = parse_count("--max-trials", raw, minimum=0)
    except ValueError:
        raise ABError(f"--max-trials: expected an int >= --trials ({trials}), found {raw!r}") from None
    if value < min_pairs:
        raise ABError(f"--max-trials: expected at least the gate's minimum of {min_pairs} pairs, found {raw!r}")
    if value < trials:
        raise ABError(f"--max-trials: expected at least --trials ({trials}), found {raw!r}")
    return value


@dataclass(frozen=True, kw_only=True)
class SettlePlan:
    """How far a job may measure beyond its first rounds, and at what level each look judges."""

    trials: int
    """the first ABBA rounds (``--trials``), run whatever the looks say"""
    max_trials: int
    """the most pairs any case gets (``--max-trials``)"""
    budget_s: float | None
    """wall-clock seconds from the job's start after which no round starts (``--budget``; None: none)"""
    alpha: float
    """the job's family-wise false-alarm rate (compare's ``--alpha``), shared by the looks"""

    @property
    def looks(self) -> int:
        """Looks planned: :data:`LOOKS`, fewer where ``--max-trials`` leaves room for fewer rounds."""
        return max(1, min(LOOKS, 1 + self.max_trials - self.trials))

    @property
    def look_alpha(self) -> float:
        """The level every look (the verdict included) judges at."""
        return self.alpha / self.looks


@dataclass(frozen=True, kw_only=True)
class OpenCase:
    """A case still ``inconclusive`` at a look."""

    name: str
    """its pytest node id, as the saved runs name it (``fullname``): what the next rounds select"""
    pairs: int | None
    """the pairs in all that the gate's next-step estimate says would settle it (None: no estimate)"""


@dataclass(frozen=True, kw_only=True)
class LookResult:
    """What one look at the pairs so far found."""

    cases: int
    """cases judged"""
    open: tuple[OpenCase, ...]
    """the cases still inconclusive"""


PairsLook = Callable[[Sequence[str], Sequence[str], float], LookResult]
"""Judges the saved pairs in this process: (base runs, head runs, alpha) → what is still open. The
command line hands in the gate's comparison; the verdict itself is still printed by the judge."""

RunRound = Callable[[int, Sequence[str]], None]
"""Runs ABBA round ``trial`` (both sides, one invocation each) of only the cases named."""


@dataclass(frozen=True, kw_only=True)
class SettleOutcome:
    """Why the extra rounds stopped, and what they cost."""

    stopped: str
    """``settled`` (nothing inconclusive), ``max`` (``--max-trials`` reached) or ``budget``"""
    open: tuple[OpenCase, ...]
    """the cases still inconclusive at the last look"""
    rounds: int
    """ABBA rounds run in all (the most pairs a case has)"""
    looks: int
    """looks taken, the last one the verdict's"""


def next_target(pairs: int, open_cases: Sequence[OpenCase], *, max_trials: int, last: bool) -> int:
    """The pair count of the next look: the largest estimate among the open cases (without one, an
    even share of what is left), at least one more round, at most ``max_trials``; ``last``: the last
    planned look, which goes to ``max_trials``."""
    if last:
        return max_trials
    estimates = [c.pairs for c in open_cases if c.pairs]
    target = max(estimates) if estimates else pairs + math.ceil((max_trials - pairs) / 2)
    return max(pairs + 1, min(max_trials, target))


def _shown(case: OpenCase) -> str:
    """A case as the lines name it: its test and parameters, without the file (``test_throughput[…]``)."""
    return case.name.rsplit("::", 1)[-1]


def _plan_line(
    found: LookResult, *, pairs: int, target: int, look: int, looks: int, round_s: float, say: Callable
) -> None:
    named = ", ".join(f"{_shown(c)} ({f'{c.pairs} pairs' if c.pairs else 'no estimate'})" for c in found.open)
    share = len(found.open) / max(found.cases, 1)
    remaining = duration_text((target - pairs) * round_s * share, exact=True)
    say(
        f"{len(found.open)} of {found.cases} cases inconclusive after {pairs} pairs: {named}; measuring only "
        f"them to {target} pairs (look {look + 1} of {looks}), about {remaining}"
        f" ({duration_text(round_s, exact=True)} a round of all {found.cases} cases)"
    )


def until_settled(
    plan: SettlePlan,
    *,
    look: PairsLook,
    run_round: RunRound,
    runs: Callable[[], tuple[Sequence[str], Sequence[str]]],
    started: float,
    first_rounds_s: float,
    say: Callable[[str], None],
    clock: Callable[[], float] = time.monotonic,
) -> SettleOutcome:
    """After the first ``plan.trials`` rounds (``first_rounds_s`` seconds; the job began at ``started``
    on ``clock``): look, and run more rounds of the open cases until settled, the maximum or the budget.
    ``runs``: each side's saved runs so far (the look judges them). The verdict is the caller's: a
    comparison of the same runs at ``plan.look_alpha``."""
    pairs, looks = plan.trials, 1
    every_case_s = first_rounds_s / max(plan.trials, 1)  # a round of every case
    found = look(*runs(), plan.look_alpha)
    while found.open:
        if pairs >= plan.max_trials:
            return SettleOutcome(stopped="max", open=found.open, rounds=pairs, looks=looks)
        target = next_target(pairs, found.open, max_trials=plan.max_trials, last=looks + 1 >= plan.looks)
        _plan_line(found, pairs=pairs, target=target, look=looks, looks=plan.looks, round_s=every_case_s, say=say)
        selection = [c.name for c in found.open]
        # A round starts only where it is expected to end within the budget: the last round of these
        # cases, before the first one a round of every case scaled to the share it runs.
        expected = every_case_s * len(selection) / max(found.cases, 1)
        ran = 0
        while pairs < target:
            if plan.budget_s is not None and clock() - started + expected > plan.budget_s:
                break
            began = clock()
            run_round(pairs + 1, selection)
            expected = clock() - began
            pairs, ran = pairs + 1, ran + 1
        if not ran:
            return SettleOutcome(stopped="budget", open=found.open, rounds=pairs, looks=looks)
        looks += 1
        found = look(*runs(), plan.look_alpha)
        if found.open and pairs < target:
            return SettleOutcome(stopped="budget", open=found.open, rounds=pairs, looks=looks)
    return SettleOutcome(stopped="settled", open=(), rounds=pairs, looks=looks)


def end_line(outcome: SettleOutcome, plan: SettlePlan, *, budget: str | None, trials: int, seconds: float) -> str:
    """The job's last line: what stopped the rounds, what is still open, the trials and the time."""
    still = ", ".join(_shown(c) for c in outcome.open)
    why = {
        "settled": "every case settled",
        "max": f"stopped at --max-trials {plan.max_trials} with {len(outcome.open)} still inconclusive: {still}",
        "budget": f"stopped by --budget {budget} with {len(outcome.open)} still inconclusive: {still}",
    }[outcome.stopped]
    return (
        f"until settled: {why}; {outcome.rounds} pairs at most, {outcome.looks} of {plan.looks} looks at alpha "
        f"{plan.alpha:g}/{plan.looks}; {trials} trials in {duration_text(seconds, exact=True)}"
    )
