"""dpbench.decision.questions.decide: a run measured until settled is answered at its design's level."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from dpbench.decision.claims import CLAIM_LEVEL, Claim
from dpbench.decision.questions import decide


def _configs(claim_level: float | None) -> pd.DataFrame:
    # ddp beats single in 7 of 8 pairs: the fixed 90% design (k = 1 at 8 pairs) claims "faster";
    # the sequential design's level (k = 0 until 9 pairs) does not.
    single = [0.010] * 8
    ddp = [0.009] * 7 + [0.0101]
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
                "claim_level": claim_level if claim_level is not None else math.nan,
            }
        )
    return pd.DataFrame(rows)


def _claim(decision) -> Claim:
    (answer,) = decision.answers
    return answer.standing("single w1").vs_leader.claim


def test_without_a_recorded_level_the_fixed_design_claims():
    decision = decide(_configs(None), ["r1"], departures={})
    assert _claim(decision) is Claim.SLOWER and decision.answers[0].level == decision.level == CLAIM_LEVEL


def test_the_recorded_level_is_the_one_claims_are_made_at_and_the_one_stated():
    decision = decide(_configs(0.9375), ["r1"], departures={})
    assert _claim(decision) is Claim.UNSETTLED
    assert decision.answers[0].level == decision.level == 0.9375  # the level every view states once
    assert decision.answers[0].standing("single w1").vs_leader.ratio.confidence == pytest.approx(1 - 2 / 256)


def test_the_level_line_says_the_looks_level_and_the_claim_level_it_tightens():
    from dpbench.decision.sequential import DEFAULT_MAX_TRIALS, plan_looks
    from dpbench.decision.text import level_line

    settled = decide(_configs(plan_looks(DEFAULT_MAX_TRIALS).look_level), ["r1"], departures={})
    assert level_line(settled) == (
        "claims at 96% intervals of paired trials (every look's, stricter than one look's 90%), in this session; "
        "level = within ±5%; unsettled = more trials needed"
    )
    fixed = decide(_configs(None), ["r1"], departures={})
    assert level_line(fixed) == (
        "claims at 90% intervals of paired trials, in this session; level = within ±5%; unsettled = more trials needed"
    )
    # A maximum of 6 looks once, at the claim level itself: nothing stricter to say.
    assert level_line(decide(_configs(plan_looks(6).look_level), ["r1"], departures={})) == level_line(fixed)
