"""dpbench.decision.sequential: the looks, the level split over them, and which configurations stay open."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

from dpbench.decision.claims import CLAIM_LEVEL, Claim, claim_of, comparison_level, family_size
from dpbench.decision.model import Entry, Question
from dpbench.decision.sequential import DEFAULT_MAX_TRIALS, look_counts, open_cases, plan_looks
from dpbench.stats import paired_ratio


@pytest.mark.parametrize(
    ("maximum", "looks"),
    [(3, (3,)), (4, (4,)), (5, (5,)), (6, (5, 6)), (8, (5, 8)), (12, (5, 8, 12)), (20, (5, 8, 12, 18, 20))],
)
def test_the_looks_start_at_five_and_grow_by_half_up_to_the_maximum(maximum, looks):
    assert look_counts(maximum) == looks


def test_the_default_design():
    plan = plan_looks(DEFAULT_MAX_TRIALS)
    assert (plan.looks, plan.min_trials, plan.max_trials, plan.level) == ((5, 8, 12), 5, 12, CLAIM_LEVEL)
    assert plan.steps_after(5) == (8, 12) and plan.steps_after(10) == (12,) and plan.steps_after(12) == ()
    assert (plan.last_look(4), plan.last_look(5), plan.last_look(7), plan.last_look(12)) == (None, 5, 5, 12)
    assert plan.to_dict() == {"min_trials": 5, "max_trials": 12, "looks": [5, 8, 12], "level": 0.9}


def test_the_level_is_split_over_the_questions_pairs_and_its_looks():
    assert (family_size(1), family_size(2), family_size(7), family_size(3, energy=True)) == (1, 1, 21, 4)
    assert comparison_level(0.9, 21, 3) == 1 - 0.1 / 63
    assert comparison_level(0.9) == 0.9
    with pytest.raises(ValueError, match="comparisons and looks: expected at least 1, found 0 and 3"):
        comparison_level(0.9, 0, 3)


@pytest.mark.parametrize("maximum", [2, 0, True, 5.0])
def test_a_maximum_below_the_fewest_pairs_is_refused_with_it(maximum):
    with pytest.raises(
        ValueError, match=rf"expected an int >= 3 \(the fewest pairs a claim is read from\), found {maximum!r}"
    ):
        plan_looks(maximum)


def _false_claims(looks, level: float, *, jobs: int, seed: int) -> float:
    """A/A comparisons of normal log noise looked at ``looks``, each at ``level``, stopped at the
    first claim: the share of jobs with a claim of a difference (through the model's own claim)."""
    rng = random.Random(seed)
    false = 0
    for _ in range(jobs):
        a = [math.exp(rng.gauss(0, 0.05)) for _ in range(max(looks))]
        b = [1.0] * len(a)
        false += any(claim_of(paired_ratio(a[:n], b[:n], level)) in (Claim.FASTER, Claim.SLOWER) for n in looks)
    return false / jobs


def test_the_design_holds_its_level_over_its_looks_where_looking_at_every_pass_would_not():
    plan = plan_looks(12)
    jobs, sd = 4000, math.sqrt(0.1 * 0.9 / 4000)  # a binomial sd of 0.0047 at 10%
    split = _false_claims(plan.looks, comparison_level(plan.level, 1, len(plan.looks)), jobs=jobs, seed=1)
    naive = _false_claims(range(5, 13), plan.level, jobs=jobs, seed=1)
    assert split <= 0.1 + 4 * sd
    assert naive > 0.1 + 4 * sd  # the reason for the design


def _entries(gaps: dict[str, float], trials: int, *, sd: float = 0.01, seed: int = 0) -> list[Entry]:
    rng = random.Random(seed)
    out = []
    for name, gap in gaps.items():
        strategy = name.split()[0]
        out.append(
            Entry(
                name=name,
                strategy=strategy,
                throughputs=tuple(100 * gap * math.exp(rng.gauss(0, sd)) for _ in range(trials)),
            )
        )
    return out


Q = Question(workload="mlp", optimizer="sgd", precision="fp32", global_batch=64)


def test_open_cases_every_configuration_before_the_first_look_none_at_the_last():
    plan = plan_looks(8)
    entries = _entries({"single w1": 1.0, "ddp w2": 1.5}, 4)
    assert open_cases({Q: entries}, plan, 4) == {"single w1", "ddp w2"}
    assert open_cases({Q: _entries({"single w1": 1.0, "ddp w2": 1.0}, 8)}, plan, 8) == set()


def test_open_cases_a_clear_gap_closes_at_the_first_look_a_tie_with_noise_stays_open():
    plan = plan_looks(12)
    clear = _entries({"single w1": 1.0, "ddp w2": 1.5, "fsdp w2": 1.2}, 5)
    assert open_cases({Q: clear}, plan, 4) == {"single w1", "ddp w2", "fsdp w2"}  # before the first look
    assert open_cases({Q: clear}, plan, 5) == set()
    # ddp and fsdp 1% apart with 4% noise: neither a difference nor inside the ±5% margin at 5 pairs.
    tie = _entries({"single w1": 1.0, "ddp w2": 1.5, "fsdp w2": 1.51}, 5, sd=0.04, seed=0)
    opened = open_cases({Q: tie}, plan, 5)
    assert "ddp w2" in opened and "fsdp w2" in opened and "single w1" not in opened


def test_between_looks_the_open_cases_are_the_last_looks():
    # A pass after the look at 5 judges nothing: whatever the sixth trials say, the cases open at 5
    # stay open until the look at 8.
    plan = plan_looks(12)
    tie = _entries({"single w1": 1.0, "ddp w2": 1.5, "fsdp w2": 1.51}, 6, sd=0.04, seed=0)
    at_five = [dataclasses.replace(e, throughputs=e.throughputs[:5]) for e in tie]
    assert open_cases({Q: tie}, plan, 6) == open_cases({Q: at_five}, plan, 5) == {"ddp w2", "fsdp w2"}


def test_open_cases_a_busy_configuration_stays_open():
    plan = plan_looks(12)
    entries = _entries({"single w1": 1.0, "ddp w2": 1.5, "fsdp w2": 1.2}, 5)
    # single is neither the leader nor its runner-up, but its trials are not trusted: its claims
    # (against the leader and every claim against it) wait for new pairs of it and the leader.
    busy = [dataclasses.replace(e, busy_share=0.6) if e.name == "single w1" else e for e in entries]
    assert open_cases({Q: entries}, plan, 5) == set()
    assert open_cases({Q: busy}, plan, 5) == {"single w1", "ddp w2"}


def test_open_cases_reads_the_designs_split_not_one_looks_level():
    # 8 pairs whose log ratios have mean 0.05 and sd 0.06: one look's 90% t-interval excludes 0,
    # the design's (90% split over 3 looks) does not.
    logs = [0.05 + 0.06 * z for z in (-1.5, -1.0, -0.5, 0.0, 0.0, 0.5, 1.0, 1.5)]
    single = [100.0] * 8
    ddp = [100.0 * math.exp(x) for x in logs]
    entries = [
        Entry(name="single w1", strategy="single", throughputs=tuple(single)),
        Entry(name="ddp w2", strategy="ddp", throughputs=tuple(ddp)),
    ]
    assert claim_of(paired_ratio(ddp, single, CLAIM_LEVEL)) is Claim.FASTER  # one look at 8 pairs
    assert claim_of(paired_ratio(ddp, single, comparison_level(CLAIM_LEVEL, 1, 3))) is Claim.UNSETTLED
    assert open_cases({Q: entries}, plan_looks(12), 8) == {"single w1", "ddp w2"}
