"""validation.aa_check's expected jump count: what the trials' spread alone gives, against an exact reference."""

from __future__ import annotations

import importlib
import math

import pytest


def _aa_check():
    return importlib.import_module("validation.aa_check")


def _frame(cases: dict[str, list[float]]) -> dict[str, list]:
    return {"fullname": list(cases), "trial_times": [list(v) for v in cases.values()]}


def _p_median_of_3_differs(sd: float, threshold: float) -> float:
    """P(|m1 − m2| > log threshold), m1, m2 medians of 3 independent N(0, sd): by integration over the
    order-statistic density 6 F (1 − F) f of a median of three."""
    from scipy import integrate, stats

    c = math.log(threshold)

    def density(x):
        f, cdf = stats.norm.pdf(x, scale=sd), stats.norm.cdf(x, scale=sd)
        return 6 * cdf * (1 - cdf) * f

    def tail(x):  # P(m2 > x + c) + P(m2 < x − c), with m2's cdf 3F² − 2F³
        def median_cdf(y):
            cdf = stats.norm.cdf(y, scale=sd)
            return 3 * cdf**2 - 2 * cdf**3

        return (1 - median_cdf(x + c)) + median_cdf(x - c)

    return integrate.quad(lambda x: density(x) * tail(x), -10 * sd, 10 * sd)[0]


def test_no_spread_expects_no_jump_and_the_count_sums_over_cases():
    aa = _aa_check()
    flat = [_frame({"a": [0.01] * 5, "b": [0.02] * 5}) for _ in range(4)]
    assert aa.expected_jumps(flat, 1.10) == 0.0
    a = 0.08  # log trial times −a, 0, +a: a within-run sd of exactly a
    spread = [math.exp(-a) * 0.01, 0.01, math.exp(a) * 0.01]
    one = aa.expected_jumps([_frame({"a": spread}), _frame({"a": spread})], 1.10, draws=50_000)
    two = aa.expected_jumps(
        [_frame({"a": spread, "b": spread}), _frame({"a": spread, "b": spread})], 1.10, draws=50_000
    )
    assert two == pytest.approx(2 * one, abs=0.02)


def test_two_runs_of_three_trials_match_the_order_statistics():
    aa = _aa_check()
    a = 0.08
    spread = [math.exp(-a) * 0.01, 0.01, math.exp(a) * 0.01]
    simulated = aa.expected_jumps([_frame({"a": spread}), _frame({"a": spread})], 1.10, draws=200_000)
    exact = _p_median_of_3_differs(a, 1.10)
    assert 0.1 < exact < 0.5  # a case where the answer is neither 0 nor 1
    assert simulated == pytest.approx(exact, abs=0.005)


def test_a_case_missing_from_a_run_is_not_counted():
    aa = _aa_check()
    spread = [0.009, 0.01, 0.011]
    assert aa.expected_jumps([_frame({"a": spread, "b": spread}), _frame({"a": spread})], 1.0) == 1.0
