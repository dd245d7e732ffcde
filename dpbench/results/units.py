"""Human-readable numbers for the report's tables and the compare table."""
from __future__ import annotations

import math
from typing import Any

__all__ = ["fmt_bytes", "fmt_num", "fmt_pct", "fmt_ratio", "fmt_seconds"]


def _is_missing(value: Any) -> bool:
    try:
        return value is None or math.isnan(float(value))
    except (TypeError, ValueError):
        return True


def fmt_num(value: Any, *, suffix: str = "") -> str:
    if _is_missing(value):
        return "–"
    v = float(value)
    text = f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"
    return text + suffix


def fmt_seconds(value: Any) -> str:
    if _is_missing(value):
        return "–"
    v = float(value)
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(v) >= scale:
            return f"{v / scale:.3g} {unit}"
    return f"{v / 1e-9:.3g} ns"


def fmt_bytes(value: Any) -> str:
    if _is_missing(value):
        return "–"
    v = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(v) < 1024:
            return f"{v:.3g} {unit}"
        v /= 1024
    return f"{v:.3g} TiB"


def fmt_ratio(value: Any) -> str:
    """``1.2`` → ``+20.0%`` (a ratio of candidate to baseline as a change)."""
    if _is_missing(value):
        return "–"
    return f"{(float(value) - 1) * 100:+.1f}%"


def fmt_pct(value: Any) -> str:
    """``0.034`` → ``3.4%`` (a coefficient of variation, an efficiency)."""
    if _is_missing(value):
        return "–"
    return f"{float(value) * 100:.1f}%"
