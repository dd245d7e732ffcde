"""Argument checks shared by the workload factories: errors name the argument and the value."""

from __future__ import annotations

import operator
from typing import Any

__all__ = ["as_int", "positive_int", "positive_ints"]


def as_int(name: str, value: Any) -> int:
    """``value`` as a Python int (ints and integer-likes such as numpy ints; not bools)."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got bool {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}") from None


def positive_int(name: str, value: Any) -> int:
    value = as_int(name, value)
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return value


def positive_ints(name: str, values: Any, *, length: int | None = None) -> tuple[int, ...]:
    """A non-empty sequence of positive ints (optionally of exactly ``length`` items) as a tuple."""
    try:
        items = tuple(values)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of ints, got {type(values).__name__} {values!r}") from None
    if not items or (length is not None and len(items) != length):
        expected = f"{length} ints" if length is not None else "at least one int"
        raise ValueError(f"{name} must have {expected}, got {values!r}")
    return tuple(positive_int(f"{name}[{i}]", v) for i, v in enumerate(items))
