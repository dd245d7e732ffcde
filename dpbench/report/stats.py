"""Small, dependency-free statistics for the regression gate: Mann-Whitney U and median CIs.

scipy is not a dependency of dpbench, so the rank test is written here: the exact null
distribution for small samples without ties, the normal approximation with tie and
continuity correction otherwise.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

__all__ = ["MannWhitneyResult", "mann_whitney_u", "median", "median_ci"]

ALTERNATIVES = ("greater", "less", "two-sided")

# Exact p-values enumerate the whole null distribution (n1 * n2 + 1 counts, built in
# O(n1 * n1 * n2) integer steps): cheap up to this many pairs, and past it the normal
# approximation is already accurate to well under 1e-3.
EXACT_MAX_PAIRS = 2500


@dataclass(frozen=True)
class MannWhitneyResult:
    """``u`` is the U statistic of ``x`` (the number of pairs with x > y, ties counting half)."""

    u: float
    p_value: float
    method: str  # "exact" or "normal"
    n_x: int
    n_y: int


def _midranks(values: Sequence[float]) -> tuple[list[float], list[int]]:
    """Ranks 1..n of ``values`` (ties get the mean of their ranks) and the tie-group sizes."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    ties: list[int] = []
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        rank = (i + j) / 2 + 1  # ranks i+1 .. j+1 share their mean
        for k in range(i, j + 1):
            ranks[order[k]] = rank
        if j > i:
            ties.append(j - i + 1)
        i = j + 1
    return ranks, ties


@lru_cache(maxsize=64)
def _u_counts(n_x: int, n_y: int) -> tuple[int, ...]:
    """How many of the C(n_x + n_y, n_x) rank arrangements give U = 0, 1, …, n_x * n_y.

    These are the coefficients of the Gaussian binomial [n_x + n_y choose n_x]_q, built as
    prod_{i=1..n_x} (1 - q^(n_y + i)) / (1 - q^i) with exact integer arithmetic.
    """
    size = n_x * n_y + 1
    poly = [0] * size
    poly[0] = 1
    for i in range(1, n_x + 1):
        shift = n_y + i
        for k in range(size - 1, shift - 1, -1):  # multiply by (1 - q^shift), in place
            poly[k] -= poly[k - shift]
        for k in range(i, size):  # divide by (1 - q^i): a running sum with stride i
            poly[k] += poly[k - i]
    return tuple(poly)


def _normal_sf(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def mann_whitney_u(
    x: Sequence[float], y: Sequence[float], *, alternative: str = "greater"
) -> MannWhitneyResult:
    """Mann-Whitney U test of ``x`` against ``y``.

    ``alternative="greater"`` asks whether ``x`` tends to be larger than ``y`` (for times:
    whether ``x`` is slower). The exact null distribution is used when there are no ties
    and at most ``EXACT_MAX_PAIRS`` pairs; otherwise the normal approximation with tie
    correction and a continuity correction of 1/2.
    """
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative: expected one of {ALTERNATIVES}, found {alternative!r}")
    n_x, n_y = len(x), len(y)
    if n_x == 0 or n_y == 0:
        raise ValueError(f"x and y: expected non-empty samples, found sizes {n_x} and {n_y}")
    combined = [float(v) for v in x] + [float(v) for v in y]
    if any(math.isnan(v) for v in combined):
        raise ValueError("x and y: expected numbers, found NaN")
    ranks, ties = _midranks(combined)
    u = sum(ranks[:n_x]) - n_x * (n_x + 1) / 2
    if not ties and n_x * n_y <= EXACT_MAX_PAIRS:
        counts = _u_counts(n_x, n_y)
        total = sum(counts)
        k = int(round(u))
        p_greater = sum(counts[k:]) / total
        p_less = sum(counts[: k + 1]) / total
        method = "exact"
    else:
        n = n_x + n_y
        mean = n_x * n_y / 2
        tie_term = sum(t**3 - t for t in ties) / (n * (n - 1)) if n > 1 else 0.0
        var = n_x * n_y / 12 * ((n + 1) - tie_term)
        if var <= 0:  # every value tied: no evidence either way
            return MannWhitneyResult(u, 1.0, "normal", n_x, n_y)
        sd = math.sqrt(var)
        p_greater = _normal_sf((u - mean - 0.5) / sd)
        p_less = _normal_sf((mean - u - 0.5) / sd)
        method = "normal"
    if alternative == "greater":
        p = p_greater
    elif alternative == "less":
        p = p_less
    else:
        p = 2 * min(p_greater, p_less)
    return MannWhitneyResult(u, min(1.0, p), method, n_x, n_y)


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    if not ordered:
        raise ValueError("median of an empty sample")
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def median_ci(median_value: float, iqr: float, n: int) -> tuple[float, float]:
    """Approximate 95% confidence interval of a median from summary statistics.

    McGill, Tukey & Larsen's notch: median ± 1.57 · IQR / √n. Two medians whose intervals do
    not overlap differ at roughly the 5% level; used when raw samples were not saved.
    """
    if n <= 0:
        raise ValueError(f"n: expected a positive sample size, found {n}")
    half = 1.57 * iqr / math.sqrt(n)
    return median_value - half, median_value + half
