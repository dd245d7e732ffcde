"""Trials until the answer is settled: when to look, and at what level, without inflating false
claims.

Looking at a comparison after a pass of trials and stopping at the first claim is a sequential
test: each look is one more chance for an interval to miss, so a design that asked the fixed
design's level at every look would claim falsely more often than that level says. The design here
looks at a few trial counts fixed in advance (:func:`look_counts`: 5, 8 and 12 at the default
maximum, each about half as many pairs again as the last) and splits the question's level over its
looks as over its comparisons (:func:`dpbench.decision.claims.comparison_level`, Bonferroni): the
chance that any look of any comparison of a question claims falsely is at most ``1 - level``,
whatever the noise's dependence between looks. Between looks every open case is measured again and
nothing is judged; a case settled at a look is measured no more, so its comparisons keep the pairs
that look judged. A run the budget stops between two looks is judged once more, at the same split:
it took fewer looks than planned, so the bound still holds.

:class:`LookPlan` states the design; :func:`open_cases` asks the decision model, at a look, which
configurations more trials could still change.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dpbench.decision.claims import CLAIM_LEVEL, LEVEL_MARGIN
from dpbench.decision.contention import CONTENDED, is_busy
from dpbench.decision.model import Answer, AnswerOutcome, Entry, Question, answer_question
from dpbench.stats import MIN_PAIRS

__all__ = [
    "DEFAULT_MAX_TRIALS",
    "FIRST_LOOK",
    "LookPlan",
    "fewest_max_trials",
    "look_counts",
    "open_cases",
    "plan_looks",
    "still_open",
]

FIRST_LOOK = 5
"""The first look's trials: the quick profile's fixed count, so a design's first look judges what a
fixed run of the quick profile judges."""
LOOK_GROWTH = 1.5
"""Each look after the first has about this many times the last one's pairs: a t-interval's width
falls as one over the root of the pairs, so a look with 1.5× the pairs is about 20% narrower, enough
to settle what the last could not, and the looks stay few (each costs the level it splits)."""
DEFAULT_MAX_TRIALS = 12
"""The default maximum: looks at 5, 8 and 12 trials, two chances after the first for a comparison
the first could not settle."""


def fewest_max_trials() -> tuple[int, str]:
    """The smallest maximum a design accepts, and why, in the words its refusals use."""
    return MIN_PAIRS, "the fewest pairs a claim is read from"


def look_counts(max_trials: int) -> tuple[int, ...]:
    """The trial counts a design with ``max_trials`` looks at: :data:`FIRST_LOOK` (or the maximum,
    when smaller), then each about :data:`LOOK_GROWTH` times the last, up to the maximum."""
    looks = [min(FIRST_LOOK, max_trials)]
    while looks[-1] < max_trials:
        looks.append(min(math.ceil(looks[-1] * LOOK_GROWTH), max_trials))
    return tuple(looks)


@dataclass(frozen=True, kw_only=True)
class LookPlan:
    """A sequential design: looks at fixed trial counts, the level split over them."""

    looks: tuple[int, ...]
    """The trial counts a look judges at, ascending; the last is the maximum."""
    level: float = CLAIM_LEVEL
    """The chance that no claim of a question, at any look, is false."""

    @property
    def min_trials(self) -> int:
        """The first look: every case runs at least this many trials."""
        return self.looks[0]

    @property
    def max_trials(self) -> int:
        """The last look: no case gets more trials than this."""
        return self.looks[-1]

    def steps_after(self, trials: int) -> tuple[int, ...]:
        """The looks still ahead after ``trials`` (none: more trials cannot settle anything more)."""
        return tuple(n for n in self.looks if n > trials)

    def last_look(self, trials: int) -> int | None:
        """The latest look at or before ``trials`` (None before the first)."""
        return max((n for n in self.looks if n <= trials), default=None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "min_trials": self.min_trials,
            "max_trials": self.max_trials,
            "looks": list(self.looks),
            "level": self.level,
        }


def plan_looks(max_trials: int, *, level: float = CLAIM_LEVEL) -> LookPlan:
    """The design that looks at :func:`look_counts` of ``max_trials``, its claims at ``level`` per
    question over all its looks."""
    fewest, why = fewest_max_trials()
    if isinstance(max_trials, bool) or not isinstance(max_trials, int) or max_trials < fewest:
        raise ValueError(f"max_trials: expected an int >= {fewest} ({why}), found {max_trials!r}")
    return LookPlan(looks=look_counts(max_trials), level=level)


def _at(entry: Entry, trials: int) -> Entry:
    """``entry`` as a look after ``trials`` passes saw it: its first ``trials`` slots."""
    return dataclasses.replace(
        entry, throughputs=entry.throughputs[:trials], joules_per_sample=entry.joules_per_sample[:trials]
    )


def open_cases(
    questions: Mapping[Question, Sequence[Entry]],
    plan: LookPlan,
    trials: int,
    *,
    busy_limit: float = CONTENDED,
    margin: float = LEVEL_MARGIN,
) -> set[str]:
    """The configurations the next pass measures after ``trials`` passes: every one before the first
    look; none once no look is left; between, those the latest look left open
    (:meth:`Answer.open_configurations` at the design's split level, on the trials that look saw),
    and every configuration whose trials ran on a busy machine."""
    names = {e.name for entries in questions.values() for e in entries}
    at = plan.last_look(trials)
    if at is None:
        return names
    if not plan.steps_after(trials):
        return set()  # no later look up to the maximum could claim what this one did not
    still: set[str] = set()
    for question, entries in questions.items():
        seen = [_at(e, at) for e in entries]
        answer = answer_question(
            question, seen, busy_limit=busy_limit, level=plan.level, looks=len(plan.looks), margin=margin
        )
        still |= still_open(answer, seen, busy_limit=busy_limit)
    return still


def still_open(answer: Answer, entries: Sequence[Entry], *, busy_limit: float = CONTENDED) -> set[str]:
    """What more trials could still change in one question: the answer's open configurations, and
    every configuration whose trials ran on a busy machine where there is anything to rank (a lone
    configuration makes no claim that a quieter machine would settle)."""
    names = set(answer.open_configurations())
    if answer.outcome is not AnswerOutcome.ALONE:
        names.update(e.name for e in entries if is_busy(e.busy_share, busy_limit))
    return names
