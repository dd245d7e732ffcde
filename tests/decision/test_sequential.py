"""dpbench.decision.sequential: the looks' exact error, the design, and which configurations stay open."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from dpbench.decision.claims import CLAIM_LEVEL, Claim, claim_of, min_pairs
from dpbench.decision.model import Entry, Question
from dpbench.decision.sequential import (
    DEFAULT_MAX_TRIALS,
    FIXED_ERROR,
    LookPlan,
    coverage,
    look_cuts,
    miss_probability,
    open_cases,
    plan_looks,
)
from dpbench.stats import median_interval, paired_ratio


def brute_force_miss(cuts: tuple[int, ...]) -> float:
    """Every sequence of signs (pair above or below the median), each 2^-n: the share in which some
    look n has at most k_n pairs on one side."""
    n = len(cuts)
    missed = 0
    for signs in itertools.product((0, 1), repeat=n):
        above = 0
        for i, (s, k) in enumerate(zip(signs, cuts), start=1):
            above += s
            if min(above, i - above) <= k:
                missed += 1
                break
    return missed / 2**n


@pytest.mark.parametrize(
    "cuts",
    [
        (-1, -1, -1, -1, 0),
        (-1, -1, -1, -1, 0, 0, 0, 1),
        (-1, -1, -1, -1, 0, 0, 0, 0, 1, 1, 1, 2),
        (-1, -1, -1, 0, 1, 1, 1, 2, 2, 2),
        (-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 2),
    ],
)
def test_the_exact_error_is_the_brute_force_enumeration(cuts):
    assert miss_probability(cuts) == pytest.approx(brute_force_miss(cuts), abs=1e-15)


def test_one_look_is_the_fixed_design():
    # One look at n with k: the miss probability is 1 - its coverage (the fixed design's error).
    for n in range(5, 14):
        for k in range((n - 1) // 2 + 1):
            cuts = (-1,) * (n - 1) + (k,)
            assert miss_probability(cuts) == pytest.approx(1 - coverage(k, n), abs=1e-15)
    assert coverage(0, 5) == 1 - 2 / 32
    # The same k as the interval the decision model reads (median_interval) picks at that level.
    for n in range(5, 20):
        values = [float(i + 1) for i in range(n)]
        lo, hi, cov = median_interval(values, 0.9375)
        k = look_cuts(0.9375, n)[-1]
        assert (lo, hi) == (values[k], values[n - 1 - k]) and cov == pytest.approx(coverage(k, n))


def test_looking_at_every_pass_at_the_fixed_level_inflates_the_error_and_the_design_does_not():
    naive = look_cuts(CLAIM_LEVEL, 12, min_trials=5)
    assert miss_probability(naive) > 1 - CLAIM_LEVEL  # the reason for the design
    for maximum in range(5, 25):
        plan = plan_looks(maximum)
        assert plan.error == pytest.approx(miss_probability(plan.cuts))
        assert plan.error <= 1 - CLAIM_LEVEL + 1e-12
        assert plan.look_level >= CLAIM_LEVEL
        assert plan.min_trials >= min_pairs()


def test_the_default_design():
    plan = plan_looks(DEFAULT_MAX_TRIALS)
    assert (plan.min_trials, plan.max_trials, plan.look_level) == (6, 12, 1 - 2 * 79 / 4096)
    assert plan.steps == (6, 10, 12)  # k = 0 from 6 pairs, 1 from 10, 2 at 12
    assert plan.error == 127 / 2048 <= FIXED_ERROR == 1 / 16  # within the fixed 5-trial design's error
    assert plan.level_at(5) == plan.level_at(6) == pytest.approx(plan.look_level)
    assert plan.steps_after(10) == (12,) and plan.steps_after(12) == ()


def test_the_stated_levels_error_would_allow_a_first_look_at_five():
    plan = plan_looks(12, budget=0.10)
    assert (plan.min_trials, plan.look_level, plan.steps, plan.error) == (5, 0.9375, (5, 9, 12), 99 / 1024)


def test_a_maximum_without_a_second_step_is_the_fixed_design_that_stops():
    plan = plan_looks(8)
    assert (plan.min_trials, plan.steps, plan.error) == (5, (5,), 1 / 16)


def test_a_maximum_below_the_minimum_is_refused_with_the_minimum():
    with pytest.raises(ValueError, match=r"expected an int >= 5 .*found 4"):
        plan_looks(4)


def _sequential_false_claims(plan: LookPlan, *, jobs: int, seed: int) -> float:
    """A/A comparisons looked at after each pair, stopped at the first claim: how often a look
    claims a difference (Monte Carlo, through the model's own claim)."""
    rng = random.Random(seed)
    false = 0
    for _ in range(jobs):
        a, b = [], []
        for n in range(1, plan.max_trials + 1):
            a.append(math.exp(rng.gauss(0, 0.05)))
            b.append(1.0)
            if n < plan.min_trials:
                continue
            claim = claim_of(paired_ratio(a, b, plan.level_at(n)), level=plan.level_at(n))
            if claim in (Claim.FASTER, Claim.SLOWER):
                false += 1
                break
    return false / jobs


def test_the_exact_bound_matches_a_seeded_monte_carlo():
    plan = plan_looks(12)
    seen = _sequential_false_claims(plan, jobs=4000, seed=1)
    # Binomial sd at 4000 jobs and p ≈ 0.097: 0.0047; 4 sds.
    assert abs(seen - plan.error) < 0.019


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


def test_open_cases_every_configuration_before_the_minimum_none_at_the_maximum():
    plan = plan_looks(8)
    entries = _entries({"single w1": 1.0, "ddp w2": 1.5}, 4)
    assert open_cases({Q: entries}, plan, 4) == {"single w1", "ddp w2"}
    assert open_cases({Q: _entries({"single w1": 1.0, "ddp w2": 1.0}, 8)}, plan, 8) == set()


def test_open_cases_a_clear_gap_closes_at_the_minimum_a_tie_with_a_wild_pair_stays_open():
    plan = plan_looks(12)
    clear = _entries({"single w1": 1.0, "ddp w2": 1.5, "fsdp w2": 1.2}, 6)
    assert open_cases({Q: clear}, plan, 5) == {"single w1", "ddp w2", "fsdp w2"}  # before the minimum
    assert open_cases({Q: clear}, plan, 6) == set()
    # ddp and fsdp 1% apart with 4% noise: neither a difference nor inside the ±5% margin at 6 pairs.
    tie = _entries({"single w1": 1.0, "ddp w2": 1.5, "fsdp w2": 1.51}, 6, sd=0.04, seed=0)
    opened = open_cases({Q: tie}, plan, 6)
    assert "ddp w2" in opened and "fsdp w2" in opened and "single w1" not in opened


def test_open_cases_a_busy_configuration_stays_open():
    plan = plan_looks(12)
    entries = _entries({"single w1": 1.0, "ddp w2": 1.5, "fsdp w2": 1.2}, 6)
    # single is neither the leader nor its runner-up, but its trials are not trusted: its claims
    # (against the leader and every claim against it) wait for new pairs of it and the leader.
    busy = [Entry(**{**e.__dict__, "busy_share": 0.6}) if e.name == "single w1" else e for e in entries]
    assert open_cases({Q: entries}, plan, 6) == set()
    assert open_cases({Q: busy}, plan, 6) == {"single w1", "ddp w2"}


def test_open_cases_reads_the_design_level_not_the_fixed_one():
    # 8 pairs with one on the other side: the fixed 90% design's k = 1 claims, the design's k = 0 does not.
    plan = plan_looks(12)
    single = [100.0] * 8
    ddp = [110.0] * 7 + [99.0]
    entries = [
        Entry(name="single w1", strategy="single", throughputs=tuple(single)),
        Entry(name="ddp w2", strategy="ddp", throughputs=tuple(ddp)),
    ]
    assert claim_of(paired_ratio(ddp, single)) is Claim.FASTER  # the fixed design at 8 pairs
    assert open_cases({Q: entries}, plan, 8) == {"single w1", "ddp w2"}
