"""decision: the answer, computed once. It owns the configurations frame's ratios (``× single``,
:mod:`~dpbench.decision.configs`), other processes' share of the machine during trials
(:mod:`~dpbench.decision.contention`), the claim one comparison supports (``faster``, ``slower``,
``level``, ``unsettled``: :mod:`~dpbench.decision.claims`), the typed answer of each question — a
workload at one recipe — (:mod:`~dpbench.decision.model`), how saved runs become questions
(:mod:`~dpbench.decision.questions`), when trials may stop without inflating false claims
(:mod:`~dpbench.decision.sequential`) and the sentences every view prints
(:mod:`~dpbench.decision.text`). The terminal, the HTML report, ``--json`` and ``dpbench run``
render a :class:`Decision`; none ranks or tests on its own.

It sits low, beside the statistics: the measuring session asks it whether a question is settled
(trials until settled), and the results, the gate and the report read through it.

May import: ``dpbench.stats``, ``dpbench.schema``, ``dpbench.errors``; pandas and scipy. Never torch,
the measuring code, the results reader, the gate or the report.
"""

from __future__ import annotations

from dpbench._lazy import lazy_attributes

__all__ = [
    "Answer",
    "Claim",
    "ConfigComparison",
    "Decision",
    "Entry",
    "Frugal",
    "LookPlan",
    "AnswerOutcome",
    "Question",
    "Standing",
    "answer_question",
    "claim_of",
    "decide",
    "headline",
    "open_cases",
    "plan_looks",
    "summary_lines",
]

_LAZY = {
    "Claim": "dpbench.decision.claims",
    "claim_of": "dpbench.decision.claims",
    "Answer": "dpbench.decision.model",
    "ConfigComparison": "dpbench.decision.model",
    "Decision": "dpbench.decision.model",
    "Entry": "dpbench.decision.model",
    "Frugal": "dpbench.decision.model",
    "AnswerOutcome": "dpbench.decision.model",
    "Question": "dpbench.decision.model",
    "Standing": "dpbench.decision.model",
    "answer_question": "dpbench.decision.model",
    "decide": "dpbench.decision.questions",
    "LookPlan": "dpbench.decision.sequential",
    "open_cases": "dpbench.decision.sequential",
    "plan_looks": "dpbench.decision.sequential",
    "headline": "dpbench.decision.text",
    "summary_lines": "dpbench.decision.text",
}

__getattr__, __dir__ = lazy_attributes("dpbench.decision", _LAZY, __all__, globals())
