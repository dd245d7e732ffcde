"""What every view of one suite shares: its rows split into workload panels, and the cell text its tables repeat.

:func:`workloads` gives the figures their panels (one per workload, collectives and plain
benchmarks under ""); :func:`workload_text`, :func:`suites_text` and :func:`interval_text` write
the same cells the same way in every table of :mod:`dpbench.report.plots` and
:mod:`dpbench.report.plots_step_times` (a dash for what is missing).
"""

from __future__ import annotations

import math

import pandas as pd

from dpbench.results.units import fmt_seconds

__all__ = ["interval_text", "suites_text", "workload_text", "workloads"]


def workloads(rows: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """``(workload, its rows)``: one figure panel each (collectives and plain benchmarks: "")."""
    key = rows["workload"].fillna("").astype(str)
    return [(w, rows[key == w]) for w in dict.fromkeys(key)]


def interval_text(lo: float, hi: float, fmt=fmt_seconds) -> str:
    return "–" if math.isnan(lo) or math.isnan(hi) else f"{fmt(lo)} – {fmt(hi)}"


def workload_text(value: object) -> str:
    return value if isinstance(value, str) and value else "–"


def suites_text(row: pd.Series) -> str:
    suites = row.get("suites")
    return ", ".join(suites) if isinstance(suites, tuple) and suites else "–"
