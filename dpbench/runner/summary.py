"""The decision in the terminal after ``dpbench run``: the same text the suite session prints under
pytest-benchmark's table (:func:`dpbench.report.session_summary.decision_text`), read from the saved
run, so the terminal, the report and ``dpbench run`` name the same best configuration by the same
estimator."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

__all__ = ["print_decision"]


def print_decision(run_file: str | Path, *, out: TextIO | None = None) -> None:
    """Print the decision of the run saved in ``run_file``."""
    from dpbench.report.session_summary import decision_text

    out = out or sys.stdout
    print("decision (per workload; the report has every number):", file=out)
    print(decision_text([run_file]).rstrip("\n") or "no training benchmarks in this run", file=out)
