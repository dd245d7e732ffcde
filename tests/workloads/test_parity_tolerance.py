"""The convergence suite's parity tolerance is derived from the spread of the final accuracy across
seeds (rounded up to whole test images, never under two), not set at one test image."""

from __future__ import annotations

import statistics

import pytest

from dpbench.workloads.recipes import DIGITS_MLP_SEED_FINALS, get_recipe, spread_tolerance


def test_two_standard_deviations_rounded_up_to_whole_images():
    finals = [346 / 359, 346 / 359, 345 / 359, 343 / 359, 344 / 359, 347 / 359]
    assert statistics.stdev(finals) * 359 == pytest.approx(1.47196, abs=1e-5)  # 2 sd = 2.94 images
    assert spread_tolerance(finals, test_images=359) == 3 / 359


def test_never_under_two_images():
    assert spread_tolerance([0.5, 0.5, 0.5], test_images=100) == 2 / 100  # no spread at all
    assert spread_tolerance([0.50, 0.51], test_images=100) == 2 / 100  # 2 sd = 1.41 images
    assert spread_tolerance([0.50, 0.53], test_images=100) == 5 / 100  # 2 sd = 4.24 images


def test_digits_mlp_allows_the_two_image_gap_of_float_noise_but_not_four():
    tolerance = get_recipe("digits-mlp").parity_tolerance
    assert tolerance == spread_tolerance(DIGITS_MLP_SEED_FINALS, test_images=359) == 3 / 359
    assert 2 / 359 <= tolerance < 4 / 359
    assert len(DIGITS_MLP_SEED_FINALS) >= 5  # a spread needs seeds
    assert get_recipe("digits-mlp").build()[0].params["test_samples"] == 359
