"""The memory estimate beside what the run measured (the memory view's marks and error table).

Reads two ``extra_info`` fields as the frame flattens them: ``memory_estimate.*`` (the estimate
checked before launch; ``memory_estimate.ranks`` per worker) and ``memory_per_rank`` (measured
after the timed steps). Renders, never judges: the error is (estimate − measured) ÷ measured.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from dpbench.results.units import fmt_bytes

__all__ = ["estimated_need", "error_table", "ERROR_COLUMNS"]

_STATE = ("params_bytes", "grads_bytes", "optimizer_state_bytes")
ERROR_COLUMNS = [
    "run",
    "workload",
    "configuration",
    "state estimated",
    "state measured",
    "state error",
    "peak estimated",
    "peak measured",
    "peak error",
]


def estimated_need(rows: pd.DataFrame) -> pd.Series:
    """Per row, the estimated need of the largest worker in bytes (NaN where none was saved)."""
    if "memory_estimate.need_bytes" not in rows.columns:
        return pd.Series(math.nan, index=rows.index)
    return pd.to_numeric(rows["memory_estimate.need_bytes"], errors="coerce")


def _ranks(value: Any) -> list[dict[str, Any]]:
    return [r for r in value if isinstance(r, dict)] if isinstance(value, list) else []


def _state(ranks: list[dict[str, Any]]) -> float:
    """The largest worker's parameters + gradients + optimizer state."""
    totals = [sum(float(r.get(k) or 0) for k in _STATE) for r in ranks]
    return max(totals) if totals else math.nan


def _error(estimate: float, measured: float) -> str:
    if not (math.isfinite(estimate) and math.isfinite(measured)) or measured <= 0:
        return "–"
    return f"{(estimate - measured) / measured:+.1%}"


def _bytes(value: float) -> str:
    return fmt_bytes(value) if math.isfinite(value) else "–"


def error_table(rows: pd.DataFrame) -> list[list[str]]:
    """One row per case that saved an estimate: the state (exact by construction) and the peak
    (the measured peak is the allocator's on CUDA, the worker's whole resident set on CPU)."""
    if "memory_estimate.ranks" not in rows.columns:
        return []
    out = []
    for _, row in rows.iterrows():
        estimated = _ranks(row.get("memory_estimate.ranks"))
        measured = _ranks(row.get("memory_per_rank"))
        if not estimated:
            continue
        need = pd.to_numeric(row.get("memory_estimate.need_bytes"), errors="coerce")
        peaks = [float(r["peak_bytes"]) for r in measured if isinstance(r.get("peak_bytes"), (int, float))]
        peak = max(peaks) if peaks else math.nan
        kind = measured[0].get("peak_kind", "") if measured else ""
        has_peak = any(r.get("peak_bytes") is not None for r in estimated)
        out.append(
            [
                str(row["run"]),
                str(row.get("workload") or "–"),
                str(row["case"]),
                _bytes(_state(estimated)),
                _bytes(_state(measured)),
                _error(_state(estimated), _state(measured)),
                _bytes(float(need)) if has_peak else "– (state only)",
                f"{_bytes(peak)} ({kind})" if kind else _bytes(peak),
                _error(float(need), peak) if has_peak else "–",
            ]
        )
    return out
