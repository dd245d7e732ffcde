"""The run comparison tables: the gate's verdicts, one row per configuration.

The gate (``dpbench compare``) judges benchmarks; several suites publish the same measured case,
so its benchmarks of one ``case_key`` carry the same trials and the same verdict. The report
shows each configuration once, naming its suites, and keeps the gate's own counts and
verdict line beside it, so the page says what ``dpbench compare`` says.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd

from dpbench.gate.compare import Verdict
from dpbench.gate.formats import HEADER, display_names, summary_line, verdict_line
from dpbench.gate.formats import rows as gate_rows
from dpbench.report.decision import RunComparison
from dpbench.report.figures import Table

__all__ = ["ComparisonTable", "comparison_tables"]


@dataclass(kw_only=True)
class ComparisonTable:
    baseline: str
    candidate: str
    note: str | None = None
    warnings: list[str] = field(default_factory=list)
    counts: str = ""
    verdict: str = ""
    configurations: int = 0
    notes: list[str] = field(default_factory=list)
    table: Table = field(default_factory=lambda: Table([], []))


def _names(configs: pd.DataFrame, runs: Sequence[str]) -> dict[str, tuple[str, str, str]]:
    """fullname → (workload, configuration, suites) over ``runs`` (the candidate's names first)."""
    out: dict[str, tuple[str, str, str]] = {}
    for run in runs:
        rows = configs[configs["run"] == run]
        for workload, case, suites, fullnames in zip(rows["workload"], rows["case"], rows["suites"], rows["fullnames"]):
            for name in fullnames:
                out.setdefault(
                    name, (str(workload) if isinstance(workload, str) else "–", str(case), ", ".join(suites) or "–")
                )
    return out


def comparison_tables(comparisons: Sequence[RunComparison], configs: pd.DataFrame) -> list[ComparisonTable]:
    out = []
    for c in comparisons:
        entry = ComparisonTable(baseline=c.baseline, candidate=c.candidate, note=c.note)
        cmp = c.comparison
        if cmp is None:
            out.append(entry)
            continue
        names = _names(configs, [c.candidate, c.baseline])
        short = display_names([b.name for b in cmp.benchmarks])
        table, classes, seen = [], [], set()
        for b, row in zip(cmp.benchmarks, gate_rows(cmp)):
            workload, case, suites = names.get(b.name, ("–", short[b.name], "–"))
            key = (workload, case, b.verdict)
            if key in seen:  # the same trials published by another suite: already shown
                continue
            seen.add(key)
            table.append([workload, case, suites] + row[1:] + [row[0]])
            classes.append(
                b.verdict.value if b.verdict in (Verdict.REGRESSED, Verdict.IMPROVED, Verdict.INCONCLUSIVE) else ""
            )
        entry.table = Table(
            ["workload", "configuration", "suites"] + HEADER[1:] + ["benchmark"], table, classes=classes
        )
        entry.warnings, entry.counts, entry.verdict = cmp.warnings, summary_line(cmp), verdict_line(cmp)
        entry.configurations = len(table)
        entry.notes = [f"{short[b.name]}: {b.note}" for b in cmp.benchmarks if b.note]
        out.append(entry)
    return out
