"""Human-readable numbers for the report's tables, the compare table and history's outputs: one
function per kind of number, so a p-value or a step time reads the same wherever it is printed."""
from __future__ import annotations

import math
from typing import Any

__all__ = ["fmt_bytes", "fmt_num", "fmt_p", "fmt_pct", "fmt_ratio", "fmt_seconds", "fmt_time"]


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


def fmt_time(value: Any, unit: str) -> str:
    """``0.0123`` in ``s/step`` → ``12.3 ms/step``: the seconds scaled (:func:`fmt_seconds`), what
    ``unit`` says after the ``s`` kept."""
    text = fmt_seconds(value)
    return text if text == "–" else f"{text}{unit.removeprefix('s')}"


def fmt_p(value: Any, *, digits: int = 2) -> str:
    """A p-value to ``digits`` significant digits (``0.0031``; history's change points, all far
    below its alpha, to one)."""
    if _is_missing(value):
        return "–"
    return f"{float(value):.{digits}g}"


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
