"""python -m validation.sequential_power_floor: the powers it prints against closed forms and a seeded draw."""

from __future__ import annotations

import importlib.util
import math
import random
import re
import statistics
from pathlib import Path

import pytest
from scipy.stats import norm

ROOT = Path(__file__).resolve().parents[2]
SD = math.sqrt(2) * 0.148  # the quick-runs model's pair spread, as the validation page quotes it
D = math.log1p(0.2)


@pytest.fixture(scope="module")
def floor():
    module = importlib.import_module("validation.sequential_power_floor")
    return module


def test_the_sign_test_claims_nothing_below_five_pairs_and_all_five_above_at_five(floor):
    assert [floor.sign_power(n, D, SD, 0.10) for n in (2, 3, 4)] == [0.0, 0.0, 0.0]
    # 5 pairs at 90%: the interval [min, max] (2 · 2⁻⁵ = 6.25%), so every pair must be above
    assert floor.sign_power(5, D, SD, 0.10) == pytest.approx(norm.cdf(D / SD) ** 5, rel=1e-12)


def test_the_z_power_is_the_closed_form_and_bounds_the_others(floor):
    assert floor.z_power(4, D, SD, 0.10) == pytest.approx(norm.cdf(D * 2 / SD - norm.ppf(0.95)), rel=1e-12)
    for n in range(2, 13):
        assert floor.t_power(n, D, SD, 0.10) < floor.z_power(n, D, SD, 0.10)
        assert floor.sign_power(n, D, SD, 0.10) < floor.z_power(n, D, SD, 0.10)


def test_the_t_power_matches_a_seeded_draw(floor):
    rng = random.Random(7)
    n, draws, claimed = 4, 10000, 0
    from scipy.stats import t

    crit = t.ppf(0.95, n - 1)
    for _ in range(draws):
        xs = [rng.gauss(D, SD) for _ in range(n)]
        claimed += statistics.fmean(xs) / (statistics.stdev(xs) / math.sqrt(n)) > crit
    assert claimed / draws == pytest.approx(floor.t_power(n, D, SD, 0.10), abs=0.015)


def test_main_prints_the_three_powers_per_pair_count_as_the_functions_give_them(floor, capsys):
    assert importlib.import_module("validation.sequential_power_floor").main(["--gaps", "0.2", "--max-pairs", "6"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if re.fullmatch(r" +\d+ +[\d.]+ +[\d.]+ +[\d.]+", line)]
    assert [int(row[0]) for row in rows] == [2, 3, 4, 5, 6]
    sd, alpha = math.sqrt(2) * floor.MODELS["quick-runs"].trial_sd, 1 - floor.CLAIM_LEVEL
    for n, sign, t_claims, z in rows:
        n = int(n)
        assert float(sign) == round(floor.sign_power(n, D, sd, alpha), 2)
        assert float(t_claims) == round(floor.t_power(n, D, sd, alpha), 2)
        assert float(z) == round(floor.z_power(n, D, sd, alpha), 2)
    assert "\ngap 20%\npairs   sign      t  z (sd known)\n" in out
