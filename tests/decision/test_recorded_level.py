"""dpbench.decision.questions.decide: a run measured until settled is answered with the level split
over its design's looks."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from dpbench.decision.claims import CLAIM_LEVEL, Claim
from dpbench.decision.questions import decide

# ddp's 8 pairs over single have log ratios of mean 0.05 and sd 0.06: one look's 90% t-interval
# excludes 0 ("faster"), the interval at 90% split over 3 looks does not.
LOGS = [0.05 + 0.06 * z for z in (-1.5, -1.0, -0.5, 0.0, 0.0, 0.5, 1.0, 1.5)]


def _configs(**design: float) -> pd.DataFrame:
    single = [0.010] * 8
    ddp = [0.010 / math.exp(x) for x in LOGS]
    rows = []
    for strategy, ws, times in (("single", 1, single), ("ddp", 2, ddp)):
        rows.append(
            {
                "run": "r1",
                "kind": "training",
                "workload": "mlp",
                "case": f"{strategy} w{ws}",
                "strategy": strategy,
                "world_size": ws,
                "batch": 64.0,
                "samples_per_s": 64 / sorted(times)[4],
                "trial_times": times,
                "foreign_cpu": math.nan,
                **design,
            }
        )
    return pd.DataFrame(rows)


def _comparison(decision):
    (answer,) = decision.answers
    return answer.standing("single w1").vs_leader


def test_without_recorded_looks_the_fixed_design_claims():
    decision = decide(_configs(), ["r1"], departures={})
    assert _comparison(decision).claim is Claim.SLOWER
    assert (decision.answers[0].looks, decision.answers[0].level, decision.level) == (1, CLAIM_LEVEL, CLAIM_LEVEL)


def test_the_recorded_looks_split_the_level_and_are_stated():
    decision = decide(_configs(claim_looks=3), ["r1"], departures={})
    comparison = _comparison(decision)
    assert comparison.claim is Claim.UNSETTLED and decision.answers[0].looks == 3
    assert comparison.ratio.confidence == pytest.approx(1 - 0.1 / 3, abs=1e-15)
    assert decision.level == CLAIM_LEVEL  # the level is the question's, whatever the looks


def test_a_run_saved_by_the_earlier_design_counts_a_look_per_trial():
    # It recorded its last look's level, not its looks: it looked after every pass from its first.
    decision = decide(_configs(claim_level=0.96142578125), ["r1"], departures={})
    assert _comparison(decision).claim is Claim.UNSETTLED and decision.answers[0].looks == 8


def test_the_level_line_says_what_the_level_is_split_over():
    from dpbench.decision.text import level_line

    settled = decide(_configs(claim_looks=3), ["r1"], departures={})
    assert level_line(settled) == (
        "claims at 90% per question (a 10% chance of any false claim, split over its comparisons and 3 looks), "
        "in this session; level = within ±5%; unsettled = more trials needed"
    )
    fixed = decide(_configs(), ["r1"], departures={})
    assert level_line(fixed) == (
        "claims at 90% per question (a 10% chance of any false claim, split over its comparisons), in this session; "
        "level = within ±5%; unsettled = more trials needed"
    )
