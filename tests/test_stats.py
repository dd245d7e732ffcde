"""The shared statistics against independent references: scipy's own interval, numpy, by hand."""

from __future__ import annotations

import math
import random
import statistics

import numpy as np
import pytest
from scipy import stats as sps

from dpbench.stats import (
    MIN_PAIRS,
    coefficient_of_variation,
    hull_interval,
    log_t_interval,
    median,
    paired_ratio,
    positive,
)


def test_log_t_interval_is_scipys_t_interval_of_the_logs():
    rng = random.Random(3)
    values = [0.02 * rng.lognormvariate(0, 0.1) for _ in range(7)]
    logs = np.log(values)
    lo, hi = sps.t.interval(0.95, len(logs) - 1, loc=logs.mean(), scale=sps.sem(logs))
    assert log_t_interval(values) == pytest.approx((math.exp(lo), math.exp(hi)), rel=1e-12)
    # multiplicative: scaling every value scales the interval
    scaled = log_t_interval([v * 3 for v in values])
    assert scaled == pytest.approx((3 * math.exp(lo), 3 * math.exp(hi)), rel=1e-12)


@pytest.mark.parametrize("values", [[], [0.1], [0.1, math.nan], [-1.0, 0.2]])
def test_log_t_interval_needs_two_positive_values(values):
    assert all(math.isnan(v) for v in log_t_interval(values))


def test_paired_ratio_by_hand():
    # Trial i of both cases: ratios 2, 2, 2, 2, 2 exactly → ratio 2, a zero-width interval that excludes 1.
    r = paired_ratio([2.0, 4.0, 6.0, 8.0, 10.0], [1.0, 2.0, 3.0, 4.0, 5.0])
    assert (r.ratio, r.pairs, r.confidence) == (pytest.approx(2.0), 5, 0.95)
    assert r.lo == pytest.approx(2.0) and r.hi == pytest.approx(2.0) and r.excludes_one
    # Ratios 0.5, 2 and 1: the median on the log scale is 1, an interval around 1.
    r = paired_ratio([1.0, 4.0, 2.0], [2.0, 2.0, 2.0])
    assert r.ratio == pytest.approx(1.0) and r.lo < 1 < r.hi and not r.excludes_one
    # Two pairs: a ratio, no interval (MIN_PAIRS), however far from 1.
    two = paired_ratio([2.0, 4.4], [1.0, 2.0])
    assert MIN_PAIRS == 3 and two.pairs == 2 and math.isnan(two.lo) and not two.excludes_one
    # Unpaired extra trials are left out; one pair has no interval and makes no claim.
    one = paired_ratio([3.0, 9.0, 9.0], [1.5])
    assert one.pairs == 1 and one.ratio == pytest.approx(2.0) and math.isnan(one.lo) and not one.excludes_one
    # A NaN slot (a disturbed trial left out) drops its pair and keeps the others paired.
    gap = paired_ratio([2.0, math.nan, 6.0], [1.0, 2.0, 2.0])
    assert gap.ratios == (2.0, 3.0) and gap.pairs == 2


@pytest.mark.parametrize("confidence", [0.9, 0.95, 1 - 0.1 / 63])
def test_the_paired_interval_is_scipys_t_interval_of_the_log_ratios(confidence):
    """Where the median lies inside it (a symmetric spread), the interval is scipy's t-interval of
    the mean log ratio, exp'd back, at the coverage asked."""
    rng = random.Random(11)
    a = [rng.lognormvariate(0, 0.1) for _ in range(8)]
    b = [rng.lognormvariate(0.2, 0.1) for _ in range(8)]
    logs = np.log(np.array(a) / np.array(b))
    lo, hi = sps.t.interval(confidence, len(logs) - 1, loc=logs.mean(), scale=sps.sem(logs))
    r = paired_ratio(a, b, confidence)
    assert lo < np.median(logs) < hi
    assert (r.lo, r.hi) == pytest.approx((math.exp(lo), math.exp(hi)), rel=1e-12) and r.confidence == confidence


def test_the_interval_is_widened_only_to_hold_the_median():
    """Seven log ratios, three low and four high: the t-interval of the mean (scipy's) ends below
    the median; the interval reaches up to the median exactly and keeps the t's lower end."""
    logs = [0.10, 0.10, 0.10, 0.30, 0.30, 0.30, 0.30]
    lo, hi = sps.t.interval(0.9, 6, loc=statistics.fmean(logs), scale=sps.sem(logs))
    assert hi < 0.30  # the t-interval alone excludes the median
    assert hull_interval(logs, 0.9) == pytest.approx((lo, 0.30), rel=1e-12)
    assert all(math.isnan(v) for v in hull_interval(logs[:2], 0.9))


def test_the_paired_interval_covers_at_its_level_under_normal_log_noise():
    """The coverage asked is what the t-interval gets on normal log ratios (its model): by
    simulation, 4,000 draws of 5 pairs at two levels."""
    rng = random.Random(7)
    for confidence in (0.9, 0.99):
        hits = 0
        for _ in range(4000):
            ratio = paired_ratio([rng.lognormvariate(0, 0.2) for _ in range(5)], [1.0] * 5, confidence)
            hits += ratio.lo <= 1 <= ratio.hi
        assert hits / 4000 == pytest.approx(confidence, abs=0.015)


def test_one_wild_pair_moves_the_median_by_one_rank():
    """The real run's ddp w1 against single (one disturbed single trial): the geometric mean said
    1.91×; the median says what the other four pairs say."""
    r = paired_ratio(
        [1 / 11.54, 1 / 9.97, 1 / 13.16, 1 / 10.01, 1 / 13.47], [1 / 11.77, 1 / 216.08, 1 / 9.71, 1 / 13.18, 1 / 15.86]
    )
    assert r.ratio == pytest.approx(15.86 / 13.47)  # the middle of 0.74, 1.02, 1.18, 1.32, 21.7
    assert statistics.geometric_mean(r.ratios) > 1.9


def test_pairing_cancels_what_the_machine_did_between_passes():
    """Pass i slows every case by the same factor: paired, the ratio is exact; unpaired it is not."""
    passes = [1.0, 1.3, 0.8, 1.6, 1.1]
    a = [2.0 * p for p in passes]
    b = [1.0 * p for p in passes]
    r = paired_ratio(a, b)
    assert r.ratio == pytest.approx(2.0) and r.hi - r.lo < 1e-9
    unpaired = log_t_interval(a)[1] / log_t_interval(b)[0]
    assert unpaired > 2.5  # comparing the two cases' own intervals would be far less certain


def test_coefficient_of_variation_and_helpers():
    values = [1.0, 1.2, 0.9, 1.1]
    assert coefficient_of_variation(values) == pytest.approx(statistics.stdev(values) / statistics.fmean(values))
    assert math.isnan(coefficient_of_variation([1.0]))
    assert positive([1, 0, -2, math.nan, math.inf, True, "3", 2.5]) == [1.0, 2.5]
    assert median([3.0, 1.0, 2.0]) == 2.0 and math.isnan(median([]))


def test_log_t_interval_matches_scipy_on_the_logs():
    values = [1.0, 1.1, 0.95, 1.2, 1.05]
    logs = [math.log(v) for v in values]
    lo, hi = sps.t.interval(0.95, len(logs) - 1, loc=statistics.fmean(logs), scale=sps.sem(logs))
    got = log_t_interval(values)
    assert got == pytest.approx((math.exp(lo), math.exp(hi)))
    assert got[0] < statistics.median(values) < got[1]
    assert all(math.isnan(v) for v in log_t_interval([1.0]))


def test_coefficient_of_variation_and_paired_ratios():
    assert coefficient_of_variation([2.0, 4.0]) == pytest.approx(statistics.stdev([2, 4]) / 3)
    assert math.isnan(coefficient_of_variation([1.0]))
    assert paired_ratio([2.0, 3.0, 4.0], [1.0, 1.5]).ratios == (2.0, 2.0)


def test_disturbance_limits_come_from_the_runs_spread_within_floor_and_cap():
    from dpbench.stats import CONTROL_CAP, TrialSeries, disturbance_limits, find_disturbed, left_out

    rng = random.Random(5)
    # Two placements whose controls differ by 2x: each judged against its own median, neither flagged.
    cases = {
        f"{p}{i}": TrialSeries(
            placement=p,
            values=tuple(0.01 * (i + 1) * rng.lognormvariate(0, 0.05) for _ in range(5)),
            controls=tuple((0.001 if p == "w1" else 0.002) * rng.lognormvariate(0, 0.02) for _ in range(5)),
        )
        for p in ("w1", "w2")
        for i in range(6)
    }
    limits = disturbance_limits(list(cases.values()))
    assert limits.control_limit == pytest.approx(1.25)  # 6 robust sds of 2% is under the floor
    assert limits.trial_limit == pytest.approx(2.0) and not limits.noisy
    assert all(w is None for whys in find_disturbed(cases, limits).values() for w in whys)
    # One control at 1.3x its placement's median: disturbed; a step time at 2.1x its case's: disturbed.
    hit = TrialSeries(placement="w2", values=(0.01, 0.01, 0.021, 0.01, 0.01), controls=(0.002, 0.0026, 0.002, 0.002))
    assert limits.why(hit, 1).startswith("control 2.6 ms = 1.3x") and "did not see it" in limits.why(hit, 2)
    assert limits.why(hit, 0) is None and limits.why(hit, 4) is None  # no control known for trial 5
    # A run spread so wide that 6 sds pass the cap: the cap flags what is twice its median.
    wide = [
        TrialSeries(
            placement="x", values=(0.01,) * 5, controls=tuple(0.001 * rng.lognormvariate(0, 0.5) for _ in range(5))
        )
        for _ in range(8)
    ]
    wide_limits = disturbance_limits(wide)
    assert wide_limits.control_limit == pytest.approx(CONTROL_CAP) and wide_limits.noisy
    # Left out only while two trials and half the case remain.
    assert left_out([None, "x", None, None, None]) == [False, True, False, False, False]
    assert left_out(["x", "x", "x", None, None]) == [False] * 5 and left_out(["x", None]) == [False, False]


def test_the_threshold_rule_is_strict_at_its_bounds_and_one_sided_each_way():
    from dpbench.stats import Threshold

    rule = Threshold(0.1)
    assert (rule.slower(1.1), rule.slower(1.1000001), rule.faster(0.9), rule.faster(0.8999999)) == (
        False,
        True,
        False,
        True,
    )
    assert [rule.beyond(r) for r in (0.5, 0.95, 1.0, 1.05, 2.0)] == [True, False, False, False, True]
    assert rule.log_up == math.log1p(0.1) and rule.log_down == math.log1p(-0.1)
    assert Threshold(1.0).log_down == -math.inf and not Threshold(1.0).faster(0.0)


def test_the_busy_run_line_is_one_sentence_for_the_session_and_the_report():
    from dpbench.stats import REMEASURE_SHARE, busy_run_line

    # 20%: what the extra pass may replace
    assert busy_run_line(disturbed=2, total=10, unreplaced=0, control_spread=0.0) is None
    assert busy_run_line(disturbed=3, total=10, unreplaced=1, control_spread=0.0) == (
        "the machine was busy during 30% of the trials (3 of 10, 1 of them not measured again): results are unreliable"
    )
    assert busy_run_line(disturbed=1, total=10, unreplaced=1, control_spread=0.5) == (
        "the machine was busy throughout: the controls spread by ±65% (robust sd), 1 of 10 trials stood out: "
        "results are unreliable"
    )
    assert busy_run_line(disturbed=0, total=0, unreplaced=0, control_spread=math.nan) is None
    assert REMEASURE_SHARE == 0.2
    # The sampler saw the machine quiet: wide controls alone are not a neighbour; many disturbed trials still are.
    assert busy_run_line(disturbed=1, total=10, unreplaced=1, control_spread=0.5, others_quiet=True) is None
    assert busy_run_line(disturbed=3, total=10, unreplaced=1, control_spread=0.5, others_quiet=True) == (
        "the machine was busy during 30% of the trials (3 of 10, 1 of them not measured again): results are unreliable"
    )


def test_the_runs_share_is_its_cases_median_and_quiet_only_where_sampled():
    from dpbench.decision.contention import CONTENDED, others_quiet, run_share

    assert run_share([0.01, math.nan, 0.5, 0.02]) == 0.02
    assert math.isnan(run_share([math.nan, None])) and math.isnan(run_share([]))
    assert [others_quiet(s) for s in (0.0, CONTENDED, 0.21, math.nan)] == [True, True, False, False]
