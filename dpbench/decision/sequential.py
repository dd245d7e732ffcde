"""Trials until the answer is settled: when to look again, and at what level, without inflating
false claims.

Looking at a comparison after every pass of trials and stopping at the first claim is a
sequential test: each look is one more chance for an interval to miss, so a design that asks the
fixed design's level at every look claims falsely more often than that level says. The rule here
keeps every look's interval distribution-free — the sign test's order statistics
``[x(k+1), x(n-k)]`` of the n paired ratios (:func:`dpbench.stats.median_interval`) — and asks
one stricter *look level* of every look from the minimum to the maximum trial count (a
Pocock-like design: the same nominal coverage at each look), chosen so that the probability that
ANY look's interval misses the true median stays within the error the fixed design states
(``1 - CLAIM_LEVEL``).

That probability is exact and holds for every continuous noise distribution: the number of pair
ratios above the true median is a fair coin's random walk, and look n's interval misses exactly
when fewer than ``k_n + 1`` pairs lie on one side of it (:func:`miss_probability`, a dynamic
programme over that walk). Every false claim is such a miss: ``faster`` or ``slower`` where the
median is 1 (the interval misses 1), ``level`` where the true gap exceeds the margin (the interval
lies inside the margin, the median outside). So one bound covers both the difference and the
equivalence claims, at every look.

Because ``k_n`` only grows, a look at a count where ``k_n`` did not grow can add no new miss (all n
pairs on one side means all n-1 were): the design spends its error in steps, and its cost is that
a comparison not settled at the minimum waits for the next step (9 pairs, then 12, at the default
maximum). :class:`LookPlan` states the design; :func:`open_cases` asks the decision model, at a
look, which configurations more trials could still change.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dpbench.decision.claims import CLAIM_LEVEL, LEVEL_MARGIN, min_pairs
from dpbench.decision.contention import CONTENDED, is_busy
from dpbench.decision.model import Answer, AnswerOutcome, Entry, Question, answer_question

__all__ = [
    "DEFAULT_MAX_TRIALS",
    "FIXED_ERROR",
    "fewest_max_trials",
    "LookPlan",
    "asked_level",
    "coverage",
    "look_cuts",
    "miss_probability",
    "open_cases",
    "plan_looks",
    "still_open",
]

DEFAULT_MAX_TRIALS = 12
"""The default maximum: the third step of the default design (k = 0 from 6 pairs, 1 from 10, 2 at
12): two chances after the first look for a comparison the first could not settle."""


def _fixed_error() -> float:
    n = min_pairs()
    return 2.0 / 2.0**n  # [min, max] of n pairs: all n on one side of the median, either side


FIXED_ERROR = _fixed_error()
"""The error the sequential design may spend: the fixed design's exact error at the fewest trials a
claim needs (5 pairs, [min, max]: 2/32 = 6.25%, what the quick profile's 5 trials claim at). It is at
most the 8-trial fixed design's (k = 1: 7.03%), so the design claims falsely no more often than
either; the stated level's 10% would allow a first look at 5 pairs but more false claims than both
(docs/validation/sequential.md has both designs simulated)."""


def fewest_max_trials(floor_level: float = CLAIM_LEVEL) -> tuple[int, str]:
    """The smallest maximum a design accepts, and why, in the words its refusals use: the fewest
    pairs whose interval reaches ``floor_level`` (the claim level, which every look asks at least)."""
    return min_pairs(floor_level), f"the fewest trials whose interval reaches the {floor_level:.0%} claim level"


def asked_level(level: float) -> float:
    """``level`` as the decision model is asked it: a hair below, because the coverages are exact
    dyadic fractions (a design's level is one of them) and scipy's binomial CDF, which
    :func:`dpbench.stats.median_interval` reads, may round one a few ulps below itself."""
    return level - 1e-12


def coverage(k: int, n: int) -> float:
    """The exact coverage of ``[x(k+1), x(n-k)]`` of n values: ``1 - 2 P(B <= k)``, B ~ Bin(n, 1/2)."""
    return 1.0 - 2.0 * sum(math.comb(n, j) for j in range(k + 1)) / 2.0**n


def _cut(level: float, n: int) -> int:
    """The largest k whose interval of n values reaches ``level`` (-1: none, no claim at n) — the
    same k :func:`dpbench.stats.median_interval` picks at that confidence."""
    k = -1
    while k + 1 <= (n - 1) // 2 and coverage(k + 1, n) >= level:
        k += 1
    return k


def look_cuts(level: float, max_trials: int, *, min_trials: int = 1) -> tuple[int, ...]:
    """``k_n`` for n = 1 … ``max_trials`` at one look level; -1 before ``min_trials`` (no look)."""
    return tuple(_cut(level, n) if n >= min_trials else -1 for n in range(1, max_trials + 1))


def miss_probability(cuts: Sequence[int]) -> float:
    """The exact probability that some look n (``cuts[n-1] = k_n``; -1: no look at n) has an
    interval that misses the true median, for continuous pair ratios: a dynamic programme over
    S_n, the pairs above the median (a fair coin's walk), absorbing where ``min(S_n, n - S_n) <= k_n``."""
    alive = {0: 1.0}  # S_n → probability of reaching it without a miss so far
    missed = 0.0
    for n, k in enumerate(cuts, start=1):
        step: dict[int, float] = {}
        for s, p in alive.items():
            step[s] = step.get(s, 0.0) + p / 2
            step[s + 1] = step.get(s + 1, 0.0) + p / 2
        alive = {}
        for s, p in step.items():
            if min(s, n - s) <= k:
                missed += p
            else:
                alive[s] = p
    return missed


@dataclass(frozen=True, kw_only=True)
class LookPlan:
    """A sequential design: look after each pass from ``min_trials`` to ``max_trials`` at one look level."""

    min_trials: int
    """The first look: the fewest pairs whose interval reaches the look level."""
    max_trials: int
    """The last look: no case gets more trials than this."""
    look_level: float
    """The coverage every look's interval needs (at least the claim level; stricter where the
    looks would otherwise spend more error than the fixed design states)."""
    error: float
    """The exact probability, under no difference, that any look from ``min_trials`` to
    ``max_trials`` misses the true median: at most ``budget``."""
    budget: float = FIXED_ERROR
    """The error the design may spend: the fixed design's exact error (:data:`FIXED_ERROR`)."""

    def level_at(self, look: int) -> float:
        """The level a look after ``look`` trials asks of every claim: the look level (as the model is
        asked it, :func:`asked_level`). Before the minimum no interval reaches it, so none claims."""
        return asked_level(self.look_level)

    @property
    def cuts(self) -> tuple[int, ...]:
        """``k_n`` for n = 1 … ``max_trials``."""
        return look_cuts(self.look_level, self.max_trials, min_trials=self.min_trials)

    @property
    def steps(self) -> tuple[int, ...]:
        """The trial counts at which a look can claim what an earlier one could not (k grows)."""
        cuts, out, last = self.cuts, [], -1
        for n, k in enumerate(cuts, start=1):
            if k > last:
                out.append(n)
                last = k
        return tuple(out)

    def steps_after(self, look: int) -> tuple[int, ...]:
        """The steps still ahead after ``look`` trials (none: more trials cannot settle anything more)."""
        return tuple(n for n in self.steps if n > look)

    def to_dict(self) -> dict[str, Any]:
        return {
            "min_trials": self.min_trials,
            "max_trials": self.max_trials,
            "look_level": self.look_level,
            "error": self.error,
            "budget": self.budget,
        }


def plan_looks(max_trials: int, *, budget: float | None = None, floor_level: float = CLAIM_LEVEL) -> LookPlan:
    """The most permissive look level (never below ``floor_level``, the claim level) whose looks from
    the first count that reaches it to ``max_trials`` miss with probability at most ``budget``
    (default :data:`FIXED_ERROR`).

    A larger maximum means more looks, so a stricter level and possibly a later first look."""
    fewest, why = fewest_max_trials(floor_level)
    if isinstance(max_trials, bool) or not isinstance(max_trials, int) or max_trials < fewest:
        raise ValueError(f"max_trials: expected an int >= {fewest} ({why}), found {max_trials!r}")
    budget = FIXED_ERROR if budget is None else budget
    levels = sorted(
        {floor_level}
        | {c for n in range(2, max_trials + 1) for k in range((n - 1) // 2 + 1) if (c := coverage(k, n)) >= floor_level}
    )
    for level in levels:
        first = next((n for n in range(2, max_trials + 1) if _cut(level, n) >= 0), None)
        if first is None:
            break
        error = miss_probability(look_cuts(level, max_trials, min_trials=first))
        if error <= budget + 1e-12:
            return LookPlan(min_trials=first, max_trials=max_trials, look_level=level, error=error, budget=budget)
    raise ValueError(f"max_trials: no look level keeps {max_trials} looks within an error of {budget:.0%}")


def open_cases(
    questions: Mapping[Question, Sequence[Entry]],
    plan: LookPlan,
    look: int,
    *,
    busy_limit: float = CONTENDED,
    margin: float = LEVEL_MARGIN,
) -> set[str]:
    """The configurations more trials could still change after ``look`` trials: every one before the
    minimum; none once no step is left up to the maximum (a look where k does not grow only widens
    an interval); between, those :meth:`Answer.open_configurations` names at the design's level, and
    every configuration whose trials ran on a busy machine."""
    names = {e.name for entries in questions.values() for e in entries}
    if look < plan.min_trials:
        return names
    if not plan.steps_after(look):
        return set()  # no later look up to the maximum could claim what this one did not
    still: set[str] = set()
    for question, entries in questions.items():
        answer = answer_question(question, entries, busy_limit=busy_limit, level=plan.level_at(look), margin=margin)
        still |= still_open(answer, entries, busy_limit=busy_limit)
    return still


def still_open(answer: Answer, entries: Sequence[Entry], *, busy_limit: float = CONTENDED) -> set[str]:
    """What more trials could still change in one question: the answer's open configurations, and
    every configuration whose trials ran on a busy machine where there is anything to rank (a lone
    configuration makes no claim that a quieter machine would settle)."""
    names = set(answer.open_configurations())
    if answer.outcome is not AnswerOutcome.ALONE:
        names.update(e.name for e in entries if is_busy(e.busy_share, busy_limit))
    return names
