"""Trials until the answer is settled, within a budget: what the session asks after each pass.

With a :class:`Settling` the :class:`~dpbench.measure.trials.TrialSession` runs its passes as
before (trial 1 of every case, then trial 2, …) up to the design's first look, and looks again at
each of its looks: the training cases are grouped into questions — a workload at one recipe
(optimizer, precision, global batch), as the saved run's decision groups them — and the decision
model, its level split over the design's looks (:mod:`dpbench.decision.sequential`), says which
configurations more trials could still change. Only those (and the references they are judged
against) get the passes up to the next look; a case once settled is not measured again, so every
case's trial i still ran in pass i and pairs with every other case's trial i. Collective cases
answer no question: they run to the first look. The session stops when nothing is open, at the
maximum, or when the next pass would not fit in the wall-clock budget.

This module knows the cases only by duck type (``strategy``, ``workload``, ``world_size``,
``global_batch``, ``options``: :class:`~dpbench.measure.cases.TrainingCase`), so the session's own
tests drive it with fakes.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dpbench.decision.contention import CONTENDED, trial_shares
from dpbench.decision.model import Answer, Entry, Question, answer_question
from dpbench.decision.sequential import DEFAULT_MAX_TRIALS, LookPlan, open_cases, plan_looks, still_open
from dpbench.decision.text import looks_text, question_label
from dpbench.measure.settings import duration_text
from dpbench.measure.trials import CaseResult
from dpbench.stats import median

__all__ = ["TrialsLook", "Settling", "name_in_question", "questions"]


def _span(low: float, high: float) -> str:
    low_text, high_text = duration_text(low), duration_text(high)
    return low_text if low_text == high_text else f"{low_text}–{high_text}"


def _question(case: Any) -> Question | None:
    """The question a training case answers; None for a case of no strategy (a collective)."""
    strategy = getattr(case, "strategy", None)
    if not strategy or getattr(case, "global_batch", None) is None:
        return None
    return Question.of(
        workload=str(getattr(case.workload, "name", case.workload)),
        global_batch=case.global_batch,
        options=getattr(case, "options", None) or {},
    )


# Options every configuration of a question shares (its recipe): the question says them, the name does not.
_RECIPE_OPTIONS = ("optimizer", "precision")


def name_in_question(case: Any) -> str:
    """``ddp(bucket_cap_mb=5) w2``: the case as its question's line names it — the question already
    says the workload and the recipe, so the name does not (its label repeats a long spec in every case)."""
    options = sorted((k, v) for k, v in (getattr(case, "options", None) or {}).items() if k not in _RECIPE_OPTIONS)
    said = f"({', '.join(f'{k}={v}' for k, v in options)})" if options else ""
    return f"{case.strategy}{said} w{case.world_size}"


def questions(
    cases: Mapping[str, Any], results: Mapping[str, CaseResult], *, cpu_count: int | None = None
) -> tuple[dict[Question, list[Entry]], dict[str, str]]:
    """The measured training cases as the decision model reads them: question → entries, and each
    entry's name → the case's key. Cases that failed, cannot run here or have no trial are left out."""
    grouped: dict[Question, list[Entry]] = {}
    keys: dict[str, str] = {}
    cores = cpu_count or os.cpu_count() or 1
    for key, case in cases.items():
        result = results[key]
        question = _question(case)
        if question is None or not result.trials or result.error is not None or result.skip_reason is not None:
            continue
        shares = [s for s in trial_shares([t.sampler for t in result.trials], cores) if s == s]
        name = str(getattr(case, "label", key))
        keys[name] = key
        grouped.setdefault(question, []).append(
            Entry(
                name=name,
                strategy=str(case.strategy),
                world_size=getattr(case, "world_size", None),
                throughputs=tuple(question.global_batch / v if v > 0 else math.nan for v in result.values),
                busy_share=median(shares) if shares else math.nan,
            )
        )
    return grouped, keys


@dataclass(frozen=True, kw_only=True)
class TrialsLook:
    """What one look found."""

    trials: int
    """The trials each still-running case has (the look's pair count)."""
    open_keys: frozenset[str]
    """The cases the next pass measures: every one before the first look, none at the last, else
    those the latest look left open."""
    unsettled: frozenset[str]
    """The cases more trials could still change, whatever the design allows next."""
    answers: tuple[Answer, ...]
    """Each question's answer at the design's level."""
    short_names: Mapping[str, str] = field(default_factory=dict)
    """Each configuration's name (its case's label, unique in the session) → its name inside its
    question (:func:`name_in_question`), where that is unique in the question."""


def _shortened(text: str, short_names: Mapping[str, str]) -> str:
    """``text`` (a reason naming configurations by their labels) with each named as its question does."""
    for name in sorted(short_names, key=len, reverse=True):
        text = text.replace(name, short_names[name])
    return text


@dataclass(frozen=True, kw_only=True)
class Settling:
    """How a session decides when to stop: the sequential design and the wall-clock budget."""

    plan: LookPlan
    """The looks and the level split over them (:func:`dpbench.decision.sequential.plan_looks`)."""
    budget_s: float | None = None
    """No pass starts that would end past this many seconds from the start (None: no budget)."""
    busy_limit: float = CONTENDED
    """Other processes' share of the cores beyond which a case's trials keep it open."""
    cpu_count: int | None = None
    """The cores other processes' share is of (None: this machine's)."""

    @classmethod
    def design(cls, max_trials: int = DEFAULT_MAX_TRIALS, *, budget_s: float | None = None) -> Settling:
        return cls(plan=plan_looks(max_trials), budget_s=budget_s)

    def look(self, cases: Mapping[str, Any], results: Mapping[str, CaseResult], trials: int) -> TrialsLook:
        """After ``trials`` passes: which of ``cases`` stay open (every one before the minimum;
        none at the maximum; collective cases none from the minimum on)."""
        grouped, keys = questions(cases, results, cpu_count=self.cpu_count)
        answers = tuple(
            answer_question(q, entries, busy_limit=self.busy_limit, level=self.plan.level, looks=len(self.plan.looks))
            for q, entries in grouped.items()
        )
        names = {n for a, es in zip(answers, grouped.values()) for n in still_open(a, es, busy_limit=self.busy_limit)}
        unsettled = frozenset(keys[n] for n in names)
        # Collective cases (no question) run until the minimum, as every case does.
        opened = open_cases(grouped, self.plan, trials, busy_limit=self.busy_limit)
        still = frozenset(cases) if trials < self.plan.min_trials else frozenset(keys[n] for n in opened)
        short: dict[str, str] = {}
        for entries in grouped.values():
            said = {e.name: name_in_question(cases[keys[e.name]]) for e in entries}
            if len(set(said.values())) == len(said):  # else the labels, which tell them apart
                short.update(said)
        return TrialsLook(trials=trials, open_keys=still, unsettled=unsettled, answers=answers, short_names=short)

    def plan_line(self, *, cases: int, pass_s: float, elapsed_s: float, passes: int = 2) -> str:
        """Once ``passes`` passes have run (``elapsed_s`` in all), from the last one (``pass_s``):
        ``24 cases; ~5 min a pass from the second; looks at 5, 8 and 12 trials, until settled at 90%
        per question; about 29 min–30 min; budget 30 min``. From the second pass, not the first: the first carries every
        case's cold start and overstates the passes after it (by ~70% on the quick profile)."""
        low = elapsed_s + max(0, self.plan.min_trials - passes) * pass_s
        high = elapsed_s + max(0, self.plan.max_trials - passes) * pass_s
        budget = f"budget {duration_text(self.budget_s)}" if self.budget_s else "no budget"
        short = ""
        if self.budget_s:
            high = min(high, self.budget_s)
            if low > self.budget_s:  # the first look would come after the budget: nothing could be claimed
                short = f" (short of the first look at {self.plan.min_trials} trials: raise it for claims)"
        return (
            f"{cases} cases; ~{duration_text(pass_s)} a pass from the second; "
            f"{looks_text(self.plan.looks)}, until settled at {self.plan.level:.0%} per question; "
            f"about {_span(min(low, high), high)}; {budget}{short}"
        )

    def end_line(self, look: TrialsLook | None, *, why: str, passes: int, trial_s: float) -> str:
        """What stopped the trials — ``settled``, ``maximum`` or ``budget`` — what is still unsettled
        and about what more trials would cost."""
        if why == "settled" or look is None or not look.unsettled:
            return f"trials settled after {passes} passes: every question has its answer"
        if why == "budget" and self.budget_s:
            stopped = f"the budget ({duration_text(self.budget_s)}) stopped the trials after {passes} passes"
        else:
            stopped = f"the trials stopped at their maximum ({self.plan.max_trials})"
        open_answers = [a for a in look.answers if a.open_configurations()]
        titles = "; ".join(
            f"{question_label(a.question)}: {', '.join(look.short_names.get(n, n) for n in a.open_configurations())}"
            for a in open_answers
        )
        needs = [a.settle_trials for a in open_answers]
        reasons = [_shortened(r, look.short_names) for a in open_answers for r in a.reasons]
        if reasons and not any(a.open_by_interval for a in open_answers):  # only contention keeps them open
            tail = f"; {'; '.join(reasons)}: a quieter machine would settle them"
        elif needs and all(n is not None for n in needs):
            more = max(max(n for n in needs if n is not None) - look.trials, 1)
            cost = more * len(look.unsettled) * trial_s
            tail = f"; about {more} more trials each would settle them (~{duration_text(cost)})"
        else:
            tail = "; more trials than can be said would settle them (the gaps sit on the margin)"
        return f"{stopped}; still unsettled: {titles or 'busy cases'}{tail}"
