"""Interval arithmetic on ``(start, end)`` pairs: union, total length, intersection, clipping.

Written by hand: it is a dozen lines of sorting, and the libraries that do it (portion,
intervaltree, pandas' IntervalIndex) either add a dependency or do not merge overlaps.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["Interval", "clip", "intersection", "length", "subtract", "union"]

Interval = tuple[float, float]


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, non-overlapping intervals covering exactly the same points (empty ones dropped)."""
    merged: list[list[float]] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def length(intervals: Iterable[Interval]) -> float:
    """Total length of the union of ``intervals``."""
    return sum(b - a for a, b in union(intervals))


def intersection(a: Iterable[Interval], b: Iterable[Interval]) -> list[Interval]:
    """The union of ``a`` intersected with the union of ``b`` (sorted, non-overlapping)."""
    left, right = union(a), union(b)
    out: list[Interval] = []
    i = j = 0
    while i < len(left) and j < len(right):
        start = max(left[i][0], right[j][0])
        end = min(left[i][1], right[j][1])
        if end > start:
            out.append((start, end))
        if left[i][1] < right[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(a: Iterable[Interval], b: Iterable[Interval]) -> list[Interval]:
    """The points of ``a`` that are not in ``b``."""
    out: list[Interval] = []
    cuts = union(b)
    for start, end in union(a):
        cursor = start
        for c_start, c_end in cuts:
            if c_end <= cursor or c_start >= end:
                continue
            if c_start > cursor:
                out.append((cursor, c_start))
            cursor = max(cursor, c_end)
        if cursor < end:
            out.append((cursor, end))
    return out


def clip(intervals: Iterable[Interval], lo: float, hi: float) -> list[Interval]:
    """Each interval cut to ``[lo, hi]``; those outside it dropped."""
    return [(max(a, lo), min(b, hi)) for a, b in intervals if min(b, hi) > max(a, lo)]
