"""``validation.gate_broad``: each simulated broad job says what share of its slowed cases it named."""

from __future__ import annotations

import math
import random

from validation.gate_broad import broad_job
from validation.noise import CLEAN


def _job(seed: int, **kwargs):
    defaults = dict(benchmarks=20, trials=5, paired=False, machine=1.0, threshold=0.1, alpha=0.01)
    return broad_job(CLEAN, random.Random(seed), **{**defaults, **kwargs})


def test_a_change_far_beyond_the_noise_is_named_in_every_slowed_case():
    failed, steady, broad, named = _job(1, share=0.5, effect=3.0)
    assert (failed, steady, broad, named) == (True, True, "regression", 1.0)


def test_an_aa_job_has_no_slowed_cases_to_name():
    failed, steady, _, named = _job(2, share=0.0, effect=1.0)
    assert not steady and math.isnan(named)
