"""Change points on synthetic series from the noise model (a small, fast version of
python -m validation.simulate_history) and exact cases where the answer is known."""

from __future__ import annotations

import random

import pytest
import scipy.stats  # noqa: F401  imported at collection, so no test pays for it

from dpbench.history.changepoints import MIN_POINTS, find_changes
from validation.noise import SeriesNoiseModel, creep_levels, draw_series, step_levels


def test_a_clean_step_is_found_at_its_commit_with_its_ratio():
    points = [[0.010, 0.0101, 0.0099]] * 20 + [[0.012, 0.0121, 0.0119]] * 20
    found = find_changes(points)
    (change,) = found.changes
    assert (change.last_before, change.first, change.first_after) == (19, 20, 20)
    assert change.ratio == pytest.approx(1.2)
    assert change.direction == "regression" and change.p < 1e-10


def test_an_improvement_is_reported_as_one():
    points = [[0.012, 0.0121, 0.0119]] * 10 + [[0.010, 0.0101, 0.0099]] * 10
    (change,) = find_changes(points).changes
    assert change.direction == "improvement" and change.ratio == pytest.approx(1 / 1.2)


def test_too_few_points_claim_nothing():
    points = [[0.01, 0.0101]] * 2 + [[0.02, 0.0201]] * (MIN_POINTS - 3)
    found = find_changes(points)
    assert not found.claimed and found.changes == [] and len(found.segments) == 1


def test_a_change_below_the_threshold_is_not_reported():
    points = [[0.010, 0.0101, 0.0099]] * 20 + [[0.0103, 0.01031, 0.01029]] * 20
    found = find_changes(points, threshold=0.05)
    assert [s.index for s in found.steps] == [20]  # confirmed, shown as a step
    assert found.changes == []  # but not a reported change


def test_one_odd_run_is_not_a_change():
    # HUD's rule: a level counts only after two points in a row.
    points = [[0.010, 0.0101, 0.0099]] * 15 + [[0.02, 0.0201, 0.0199]] + [[0.010, 0.0101, 0.0099]] * 15
    assert find_changes(points).changes == []


def _flat(level: float, n: int, rng: random.Random, cv: float = 0.03) -> list[list[float]]:
    return [[level * rng.lognormvariate(0, cv) for _ in range(5)] for _ in range(n)]


def test_two_real_regressions_a_few_commits_apart_stay_two():
    """Each step is +20%, far beyond the 5% threshold, significantly: two changes, not one creep."""
    rng = random.Random(4)
    points = _flat(0.010, 15, rng) + _flat(0.012, 6, rng) + _flat(0.0144, 15, rng)
    changes = find_changes(points).changes
    assert [(c.first, c.direction) for c in changes] == [(15, "regression"), (21, "regression")]
    assert [round(c.ratio, 1) for c in changes] == [1.2, 1.2]


def test_creep_steps_that_read_beyond_the_threshold_are_still_one_creep():
    """Three +6% steps 5 commits apart: each beyond 5% but not significantly so: one regression over all three."""
    rng = random.Random(5)
    points = (
        _flat(0.010, 12, rng) + _flat(0.0106, 5, rng) + _flat(0.010 * 1.06**2, 5, rng) + _flat(0.010 * 1.06**3, 12, rng)
    )
    (change,) = find_changes(points).changes
    assert change.direction == "regression" and change.ratio == pytest.approx(1.06**3, rel=0.03)
    assert change.last_before <= 12 and change.first_after >= 22 - 1


def test_bad_points_are_refused():
    with pytest.raises(ValueError, match="positive trial times"):
        find_changes([[0.01], [], [0.01], [0.01]])


def _rate(scenario, n: int, seed: int) -> float:
    rng = random.Random(seed)
    return sum(scenario(rng) for _ in range(n)) / n


@pytest.mark.slow
def test_detection_rates_on_the_noise_model():
    """40 series per scenario (the script runs 1000): loose bounds around the table of docs/validation/history.md."""
    noise = SeriesNoiseModel()

    def stationary(rng):
        return len(find_changes(draw_series([0.01] * 50, rng, noise)).changes)

    def step(rng):
        at = rng.randint(10, 40)
        found = find_changes(draw_series(step_levels(50, at, 1.10), rng, noise)).changes
        return len(found) == 1 and abs(found[0].first - at) <= 1

    def creep(rng):
        at = rng.randint(8, 30)
        found = find_changes(draw_series(creep_levels(50, [at, at + 5, at + 10], 1.04), rng, noise)).changes
        return (
            len(found) == 1
            and found[0].direction == "regression"
            and found[0].ratio >= 1.08
            and found[0].last_before < at + 10
            and found[0].first_after >= at
        )

    assert _rate(stationary, 40, 1) <= 0.05
    assert _rate(step, 40, 2) >= 0.85
    assert _rate(creep, 40, 3) >= 0.85  # 98.7-99.0% over 1000 series (two seeds): one creep, not split
