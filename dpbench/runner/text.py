"""The decision in the terminal after ``dpbench run``: the words of the decision model the report
rendered (:func:`dpbench.report.text.decision_text`), so the terminal, the report and
``--json`` render one object."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from dpbench.decision.model import Decision

__all__ = ["print_decision"]


def print_decision(
    run_file: str | Path | None = None, *, decision: Decision | None = None, out: TextIO | None = None
) -> None:
    """Print the decision of the run saved in ``run_file`` (or the ``decision`` already computed)."""
    from dpbench.report.text import TERMINAL_LINES, decision_text

    out = out or sys.stdout
    files = [run_file] if run_file is not None else []
    text = decision_text(files, decision=decision, max_lines=TERMINAL_LINES)
    print("decision (per question: a workload at one recipe; the report has every number):", file=out)
    print(text.rstrip("\n") or "no training benchmarks in this run", file=out)
