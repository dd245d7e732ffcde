"""Mann-Whitney U against brute-force enumeration of every rank arrangement, and by hand."""
from __future__ import annotations

import itertools
import math
import random

import pytest

from dpbench.report.stats import EXACT_MAX_PAIRS, mann_whitney_u, median, median_ci


def brute_force_p(x, y, alternative):
    """The permutation p-value: every way of splitting the pooled values into |x| and |y|."""
    pooled = list(x) + list(y)

    def u_of(xs, ys):
        return sum((a > b) + 0.5 * (a == b) for a in xs for b in ys)

    observed = u_of(x, y)
    us = []
    for idx in itertools.combinations(range(len(pooled)), len(x)):
        chosen = set(idx)
        us.append(u_of([pooled[i] for i in idx], [pooled[i] for i in range(len(pooled)) if i not in chosen]))
    greater = sum(u >= observed - 1e-9 for u in us) / len(us)
    less = sum(u <= observed + 1e-9 for u in us) / len(us)
    return observed, {"greater": greater, "less": less, "two-sided": min(1.0, 2 * min(greater, less))}[alternative]


def test_hand_computed_values():
    # x entirely below y: U = 0; only 1 of C(6, 3) = 20 arrangements is that extreme.
    r = mann_whitney_u([1, 2, 3], [4, 5, 6], alternative="less")
    assert (r.u, r.method) == (0.0, "exact")
    assert r.p_value == pytest.approx(1 / 20)
    assert mann_whitney_u([1, 2, 3], [4, 5, 6], alternative="greater").p_value == pytest.approx(1.0)
    # U counts the pairs with x > y: 5 > {4, 2}, 3 > {2}, 7 > {4, 2} (not 8) → 2 + 1 + 2 = 5.
    assert mann_whitney_u([5, 3, 7], [4, 2, 8]).u == 5.0
    # Ties count half: 2 = 2 gives 0.5, 3 > 2 gives 1.
    assert mann_whitney_u([2, 3], [2]).u == 1.5


@pytest.mark.parametrize("n_x,n_y", [(3, 4), (5, 5), (6, 4), (2, 7)])
@pytest.mark.parametrize("alternative", ["greater", "less", "two-sided"])
def test_exact_matches_enumeration(n_x, n_y, alternative):
    rng = random.Random(n_x * 100 + n_y)
    for _ in range(3):
        x = [rng.gauss(0.3, 1) for _ in range(n_x)]
        y = [rng.gauss(0, 1) for _ in range(n_y)]
        u, p = brute_force_p(x, y, alternative)
        r = mann_whitney_u(x, y, alternative=alternative)
        assert r.method == "exact"
        assert r.u == pytest.approx(u)
        assert r.p_value == pytest.approx(p, abs=1e-12)


def test_ties_use_the_normal_approximation_close_to_the_permutation_p():
    x = [1, 2, 2, 3, 4, 4, 5, 6]
    y = [2, 3, 3, 4, 5, 6, 6, 7]
    r = mann_whitney_u(x, y, alternative="less")
    _, p = brute_force_p(x, y, "less")
    assert r.method == "normal"
    assert r.p_value == pytest.approx(p, abs=0.02)


def test_normal_approximation_agrees_with_exact_for_larger_samples():
    rng = random.Random(7)
    x = [rng.gauss(0.5, 1) for _ in range(30)]
    y = [rng.gauss(0, 1) for _ in range(30)]
    exact = mann_whitney_u(x, y)
    assert exact.method == "exact"
    big = mann_whitney_u(x * 2, y * 2)  # duplicates create ties → normal approximation
    assert big.method == "normal"
    # Same data at n = 60: not identical p, but the same side of any sensible alpha.
    assert (exact.p_value < 0.05) == (big.p_value < 0.05)
    assert 30 * 30 <= EXACT_MAX_PAIRS


def test_all_values_tied_is_no_evidence():
    assert mann_whitney_u([1.0] * 5, [1.0] * 5).p_value == 1.0


@pytest.mark.parametrize("x,y,match", [([], [1.0], "non-empty"), ([1.0], [math.nan], "NaN")])
def test_bad_input_names_the_problem(x, y, match):
    with pytest.raises(ValueError, match=match):
        mann_whitney_u(x, y)


def test_unknown_alternative_lists_the_known_ones():
    with pytest.raises(ValueError, match="two-sided"):
        mann_whitney_u([1.0], [2.0], alternative="bigger")


def test_median_and_its_ci():
    assert median([3, 1, 2]) == 2
    assert median([4, 1, 2, 3]) == 2.5
    lo, hi = median_ci(10.0, 2.0, 16)
    assert (lo, hi) == pytest.approx((10 - 1.57 * 2 / 4, 10 + 1.57 * 2 / 4))
    with pytest.raises(ValueError, match="n: expected a positive"):
        median_ci(1.0, 1.0, 0)
