"""The one formatting of each kind of number: a step time with its unit, a p-value."""

from __future__ import annotations

import math

from dpbench.results.units import fmt_p, fmt_time


def test_a_time_keeps_its_units_tail():
    assert fmt_time(0.0123, "s/step") == "12.3 ms/step"
    assert fmt_time(2.5, "s") == "2.5 s"
    assert fmt_time(math.nan, "s/step") == "–"


def test_a_p_value_to_its_significant_digits():
    assert fmt_p(0.003123) == "0.0031"
    assert fmt_p(0.003123, digits=1) == "0.003"
    assert fmt_p(2.4e-7) == "2.4e-07"
    assert fmt_p(math.nan) == "–" and fmt_p(None) == "–"
