"""The next step of an inconclusive case: trials a side from the test's own variances, or --aa / ab."""

from __future__ import annotations

import math
from statistics import NormalDist

import pytest

from dpbench.gate.next_step import LEGEND, plan
from dpbench.gate.verdicts import BenchmarkComparison, Verdict


def _case(**kwargs) -> BenchmarkComparison:
    fields = dict(
        name="t.py::test_x[ddp-mlp-w2]",
        verdict=Verdict.INCONCLUSIVE,
        ratio=1.2,
        excess=1.2,
        threshold=0.1,
        trial_var=0.01,
        fixed_var=0.0005,
        baseline_trials=5,
        candidate_trials=5,
    )
    fields.update(kwargs)
    return BenchmarkComparison(**fields)


def test_more_trials_a_side_from_the_power_model():
    # The reference: var(log change) = trial_var · 2/n + fixed must reach (log 1.2 / (z_{1-α/m} + z_0.8))².
    z = NormalDist().inv_cdf(1 - 0.01 / 10) + NormalDist().inv_cdf(0.8)
    n = math.ceil(2 * 0.01 / ((math.log(1.2) / z) ** 2 - 0.0005))
    assert n == 13
    step = plan(_case(), alpha=0.01, family_size=10, method="trials")
    assert step.kind == "trials" and step.short == "13 trials a side"
    assert step.text == (
        "13 trials a side (8 more; pytest --dpbench-trials 13) would show a +20.0% change at α/10 with 80% power"
    )


def test_a_between_run_offset_too_wide_for_any_trials_asks_for_aa_or_ab():
    step = plan(_case(fixed_var=0.02), alpha=0.01, family_size=10, method="trials")
    assert step.kind == "aa-or-ab" and step.short == "--aa or ab (±15%)"  # e^sqrt(0.02) - 1 = 15.2%
    assert step.text.startswith("more trials cannot settle a +20.0% change: a fresh session alone moves it ±15%;")


def test_pairs_for_ab():
    step = plan(_case(pairs=4, fixed_var=0.0), alpha=0.01, family_size=10, method="paired")
    z = NormalDist().inv_cdf(1 - 0.001) + NormalDist().inv_cdf(0.8)
    n = math.ceil(0.01 / (math.log(1.2) / z) ** 2)
    assert step.kind == "pairs" and step.short == f"{n} pairs" and f"dpbench ab --trials {n}" in step.text
    assert "dpbench ab --trials N" in LEGEND["pairs"] and "pytest" not in LEGEND["pairs"]
    # A change too small for the pairs' spread: already paired, so neither --aa nor "use ab" is the step.
    tiny = plan(
        _case(pairs=6, fixed_var=0.0, trial_var=0.1, ratio=1.12, excess=1.12),
        alpha=0.01,
        family_size=10,
        method="paired",
    )
    assert tiny.kind == "pairs" and "pairs would be needed" in tiny.text and "--aa" not in tiny.short


def test_the_machine_moved_and_too_few_trials():
    moved = plan(_case(ratio=1.3, excess=1.05), alpha=0.01, family_size=10, method="trials")
    assert moved.kind == "ab" and moved.short == "ab: the machine moved"
    few = plan(_case(baseline_trials=1), alpha=0.01, family_size=10, method="trials")
    assert few.kind == "two-trials" and "--dpbench-trials" in few.text


def test_no_plan_for_a_settled_verdict():
    assert plan(_case(verdict=Verdict.REGRESSED), alpha=0.01, family_size=10, method="trials") is None


def test_after_aa_runs_only_pairing_is_left():
    step = plan(_case(fixed_var=0.02), alpha=0.01, family_size=10, method="trials", aa=True)
    assert step.kind == "ab-after-aa" and step.short == "ab (±15%)" and "--aa" not in step.short


def test_a_between_run_offset_that_fresh_sessions_average_out_asks_for_runs_a_side():
    # fixed = 0.0005 of the machine's move + 0.0035 between-run at one run a side: no trials settle
    # it, but R runs a side make var = (trial_var · 2/5 + 0.0035) / R + 0.0005, which must reach the budget.
    z = NormalDist().inv_cdf(1 - 0.01 / 10) + NormalDist().inv_cdf(0.8)
    budget = (math.log(1.2) / z) ** 2
    assert 0.004 > budget
    runs = math.ceil((0.01 * 2 / 5 + 0.0035) / (budget - 0.0005))
    assert runs == 5
    step = plan(_case(fixed_var=0.004, session_var=0.0035, runs=1), alpha=0.01, family_size=10, method="trials")
    assert (step.kind, step.short, step.count) == ("runs", "5 runs a side", 5)
    assert step.text.startswith("5 runs a side (4 more of each: fresh sessions")
    assert "dpbench compare --baseline" in LEGEND["runs"]
    # More than MAX_RUNS sessions (15 here): --aa or ab, as before.
    far = plan(_case(fixed_var=0.02, session_var=0.0195, runs=1), alpha=0.01, family_size=10, method="trials")
    assert far.kind == "aa-or-ab"


def test_where_the_machines_move_not_a_session_is_what_is_wide_only_pairing_is_named():
    # fixed = 0.004, all of it the uncertainty of the machine's move (no between-run offset fitted):
    # --aa runs measure a session's move, which is 0 here, so the step is ab, worded as the shift.
    step = plan(_case(fixed_var=0.004, session_var=0.0, runs=1), alpha=0.01, family_size=10, method="trials")
    assert math.expm1(math.sqrt(0.004)) == pytest.approx(0.0653, abs=1e-4)
    assert (step.kind, step.short) == ("ab-shift", "ab (shift ±7%)")
    assert step.text == (
        "more trials cannot settle a +20.0% change: the machine's move between the runs, taken out of every case, "
        "is known only to ±7%; pair the sides with `dpbench ab BASE HEAD`, where the move cancels"
    )
    assert "--aa" not in step.text and "fresh session" not in step.text
    # The session's share the larger (0.02 of 0.0205) and beyond MAX_RUNS: its move is named, as before.
    many = plan(_case(fixed_var=0.0205, session_var=0.02, runs=1), alpha=0.01, family_size=10, method="trials")
    assert many.kind == "aa-or-ab" and "a fresh session alone moves it" in many.text
