"""What every view of one suite shares: its rows split into workload panels, and the cell text its tables repeat.

:func:`workloads` gives the figures their panels (one per workload, collectives and plain
benchmarks under ""); :func:`workload_text`, :func:`suites_text` and :func:`interval_text` write
the same cells the same way in every table of :mod:`dpbench.report.plots` and
:mod:`dpbench.report.plots_step_times` (a dash for what is missing); :func:`energy_cells` a case's
GPU energy, or why it is absent.
"""

from __future__ import annotations

import math

import pandas as pd

from dpbench.decision.text import energy_gap_text, joules_text
from dpbench.results.units import fmt_pct, fmt_seconds

__all__ = ["energy_absence", "energy_cells", "interval_text", "suites_text", "workload_text", "workloads"]


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


def _finite(row: pd.Series, key: str) -> float:
    value = row.get(key)
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else math.nan


def energy_absence(row: pd.Series) -> str | None:
    """Why a case has no energy per sample (None where it has one, or recorded none: older runs),
    from its ``energy.absent`` kind and the first trial record that says it."""
    kind = row.get("energy.absent")
    if not isinstance(kind, str):
        return None
    records = row.get("energy.trials") if isinstance(row.get("energy.trials"), list) else []
    record = next((r for r in records if isinstance(r, dict) and r.get("absent") == kind), {"absent": kind})
    return energy_gap_text(record)


def energy_cells(row: pd.Series) -> tuple[str, str]:
    """``("0.0123 J/sample (CV 2.0%)", "251 W (idle 61 W)")``: the median over trials of the GPU energy
    per sample and of the average draw, their between-trial spread and the session's idle draw; an
    absent reading says why, never 0."""
    absent = energy_absence(row)
    if absent is not None:
        return f"absent: {absent}", "–"
    per_sample, watts = _finite(row, "energy.j_per_sample"), _finite(row, "energy.avg_w")
    if math.isnan(per_sample):
        return "–", "–"
    cv, idle = _finite(row, "energy.j_per_sample_cv"), _finite(row, "energy.idle_w")
    spread = f" (CV {fmt_pct(cv)})" if not math.isnan(cv) else ""
    idle_text = f"idle {idle:.0f} W" if not math.isnan(idle) else "idle not read"
    return f"{joules_text(per_sample)}{spread}", f"{watts:.0f} W ({idle_text})" if not math.isnan(watts) else "–"
