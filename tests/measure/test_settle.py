"""dpbench.measure.settle with dpbench.measure.trials: trials until the answer is settled, within a budget."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pytest

from dpbench.decision.sequential import plan_looks
from dpbench.decision.text import workload_label
from dpbench.measure.remeasure import remeasure
from dpbench.measure.settings import parse_budget, parse_max_trials
from dpbench.measure.settle import Settling
from dpbench.measure.trials import TrialResult, TrialSession

WOBBLE = (1.0, 1.01, 0.99, 1.005, 0.995)


@dataclass
class FakeTraining:
    """A training case whose n-th trial (a re-measurement included) takes ``step_s × factors[n % len]``
    seconds per step."""

    strategy: str
    world_size: int
    step_s: float
    factors: tuple[float, ...] = WOBBLE
    workload: str = "mlp"
    global_batch: int = 64
    options: dict = field(default_factory=dict)
    reference: Any = None
    calls: list = field(default_factory=list)

    @property
    def key(self):
        return f"{self.strategy}-{self.workload}-w{self.world_size}-{sorted(self.options.items())}"

    @property
    def label(self):
        return f"{self.strategy} w{self.world_size}"

    def measure_trial(self, profile, *, trial, steps_per_round, timeline, first):
        value = self.step_s * self.factors[len(self.calls) % len(self.factors)]
        self.calls.append(trial)
        return TrialResult(
            trial=trial,
            order=-1,
            started_at=math.nan,
            steps_per_round=5,
            round_times=[value],
            unit_times=[value] * 3,
            control_s=0.001,
            placement="one-host",
        )


@dataclass
class FakeCollective(FakeTraining):
    strategy: str = ""
    world_size: int = 2
    step_s: float = 0.001

    @property
    def key(self):
        return "allreduce-1MB"

    @property
    def label(self):
        return "allreduce 1 MB w2"


def _run(cases, *, max_trials=8, budget_s=None):
    lines: list[str] = []
    settling = Settling(plan=plan_looks(max_trials), budget_s=budget_s, cpu_count=2)
    session = TrialSession(
        profile=None,
        trials=max_trials,
        until_settled=settling,
        progress=lambda text, **kw: lines.append(text) if not kw else None,
    )
    for case in cases:
        session.add(case)
    session.run()
    return session, lines


def test_a_clear_gap_stops_at_the_minimum():
    single, ddp, fsdp = FakeTraining("single", 1, 0.010), FakeTraining("ddp", 2, 0.005), FakeTraining("fsdp", 2, 0.007)
    session, lines = _run([single, ddp, fsdp], max_trials=12)
    assert [len(c.calls) for c in (single, ddp, fsdp)] == [5, 5, 5]
    assert session.passes == 5 and session.stopped == "settled"
    assert session.claim_looks == 3  # the looks at 5, 8 and 12 its level is split over
    assert lines[-1] == "trials settled after 5 passes: every question has its answer"


def test_a_tie_runs_to_the_maximum_and_only_the_open_cases_get_more_trials():
    # ddp and fsdp 10% either side of each other, pass by pass: never a difference, never level.
    single = FakeTraining("single", 1, 0.020)
    ddp = FakeTraining("ddp", 2, 0.010)
    fsdp = FakeTraining("fsdp", 2, 0.010, factors=(1.1, 0.9))
    session, lines = _run([single, ddp, fsdp], max_trials=12)
    assert [len(c.calls) for c in (single, ddp, fsdp)] == [5, 12, 12]
    assert ddp.calls == list(range(12))  # trial i in pass i: slot i pairs with every case's slot i
    assert session.stopped == "maximum"
    assert lines[-1].startswith(
        "the trials stopped at their maximum (12); still unsettled: mlp (sgd · fp32 · global batch 64): "
    )
    assert "ddp w2" in lines[-1] and "fsdp w2" in lines[-1] and "single" not in lines[-1]


def test_the_reference_of_an_open_case_is_measured_with_it():
    single = FakeTraining("single", 1, 0.020)
    ddp = FakeTraining("ddp", 2, 0.010, reference=single)
    fsdp = FakeTraining("fsdp", 2, 0.010, factors=(1.1, 0.9), reference=single)
    _run([single, ddp, fsdp], max_trials=12)
    assert [len(c.calls) for c in (single, ddp, fsdp)] == [12, 12, 12]


def test_a_maximum_of_one_look_is_the_fixed_design_that_stops_there():
    # At most 5 trials the design's one look is the 5th: a tie stops there, at the maximum.
    single, ddp = FakeTraining("single", 1, 0.020), FakeTraining("ddp", 2, 0.010)
    fsdp = FakeTraining("fsdp", 2, 0.010, factors=(1.1, 0.9))
    session, lines = _run([single, ddp, fsdp], max_trials=5)
    assert [len(c.calls) for c in (single, ddp, fsdp)] == [5, 5, 5] and session.stopped == "maximum"
    assert session.claim_looks == 1
    assert lines[-1].startswith("the trials stopped at their maximum (5); still unsettled: ")


def test_the_budget_stops_the_trials_and_says_what_is_unsettled():
    single, ddp = FakeTraining("single", 1, 0.010), FakeTraining("ddp", 2, 0.005)
    session, lines = _run([single, ddp], budget_s=1e-9)  # spent by the first pass
    assert [len(c.calls) for c in (single, ddp)] == [1, 1]
    assert session.stopped == "budget" and session.claim_looks == 2  # judged at the split of both looks
    assert lines[-1].startswith("the budget (0 s) stopped the trials after 1 passes; still unsettled: ")


def test_the_plan_line_comes_after_the_second_pass():
    single, ddp = FakeTraining("single", 1, 0.010), FakeTraining("ddp", 2, 0.005)
    seen: list[tuple[str, int]] = []  # each line with the trials measured when it was said
    session = TrialSession(
        profile=None,
        trials=12,
        until_settled=Settling(plan=plan_looks(12), budget_s=1800, cpu_count=2),
        progress=lambda text, **kw: seen.append((text, len(single.calls) + len(ddp.calls))),
    )
    for case in (single, ddp):
        session.add(case)
    session.run()
    plan = [(line, measured) for line, measured in seen if "until settled at" in line]
    assert len(plan) == 1
    line, measured = plan[0]
    assert measured == 4  # both cases' first two trials, no third
    assert line.startswith(
        "2 cases; ~0 s a pass from the second; looks at 5, 8 and 12 trials, until settled at 90% per question"
    )
    assert line.endswith("; budget 30 min")


def test_the_plan_line_says_when_the_budget_ends_before_the_first_look():
    settling = Settling(plan=plan_looks(12), budget_s=600)
    # Two passes of 24 cases at 12 s a trial: 576 s, then 288 s a pass — 29 min before the first look.
    line = settling.plan_line(cases=24, pass_s=288.0, elapsed_s=576.0)
    assert line == (
        "24 cases; ~5 min a pass from the second; looks at 5, 8 and 12 trials, until settled at 90% per question; "
        "about 10 min; budget 10 min (short of the first look at 5 trials: raise it for claims)"
    )
    assert Settling(plan=plan_looks(12), budget_s=1800).plan_line(cases=24, pass_s=288.0, elapsed_s=576.0) == (
        "24 cases; ~5 min a pass from the second; looks at 5, 8 and 12 trials, until settled at 90% per question; "
        "about 24 min–30 min; budget 30 min"
    )


def test_a_collective_case_runs_the_minimum():
    single, ddp = FakeTraining("single", 1, 0.020), FakeTraining("ddp", 2, 0.010)
    fsdp = FakeTraining("fsdp", 2, 0.010, factors=(1.1, 0.9))
    comm = FakeCollective()
    _run([single, ddp, fsdp, comm], max_trials=12)
    assert len(comm.calls) == 5 and len(ddp.calls) == 12


def test_a_case_on_a_busy_machine_stays_open():
    busy = {"devices": {"cpu": {"cpu_pct_mean": 90.0}, "pid:1": {"cpu_pct_mean": 20.0}}}  # others: 80% of 2 cores

    @dataclass
    class Busy(FakeTraining):
        def measure_trial(self, profile, **kw):
            result = super().measure_trial(profile, **kw)
            result.sampler = busy
            return result

    # single is neither the leader nor its runner-up, but every claim on it waits for a quieter pass:
    # it and the leader it pairs with are measured on; fsdp's claim against the leader is settled.
    single, ddp, fsdp = Busy("single", 1, 0.010), FakeTraining("ddp", 2, 0.005), FakeTraining("fsdp", 2, 0.008)
    _run([single, ddp, fsdp], max_trials=12)
    assert [len(c.calls) for c in (single, ddp, fsdp)] == [12, 12, 5]


def test_a_lone_configuration_on_a_busy_machine_stops_at_the_minimum():
    """``--strategies single``: one configuration, nothing to rank; a busy machine cannot unsettle a
    comparison there is none of: it stopped only at the maximum, "still unsettled: busy cases"."""
    busy = {"devices": {"cpu": {"cpu_pct_mean": 90.0}, "pid:1": {"cpu_pct_mean": 20.0}}}

    @dataclass
    class Busy(FakeTraining):
        def measure_trial(self, profile, **kw):
            result = super().measure_trial(profile, **kw)
            result.sampler = busy
            return result

    single = Busy("single", 1, 0.010)
    session, lines = _run([single], max_trials=12)
    assert (len(single.calls), session.stopped) == (5, "settled")
    assert lines[-1] == "trials settled after 5 passes: every question has its answer"


def test_the_questions_follow_the_recipe():
    # AdamW cases are their own question: their tie keeps them open; the SGD question settles.
    sgd = [FakeTraining("single", 1, 0.020), FakeTraining("ddp", 2, 0.010)]
    adamw = [
        FakeTraining("ddp", 2, 0.012, options={"optimizer": "adamw"}),
        FakeTraining("fsdp", 2, 0.012, factors=(1.1, 0.9), options={"optimizer": "adamw"}),
    ]
    _run([*sgd, *adamw], max_trials=12)
    assert [len(c.calls) for c in sgd + adamw] == [5, 5, 12, 12]


def test_remeasuring_works_with_cases_of_unequal_trial_counts():
    single = FakeTraining("single", 1, 0.020)
    ddp = FakeTraining("ddp", 2, 0.010)
    # fsdp's trial 6 is far out: disturbed; measured again (its 13th call) it is clean.
    fsdp = FakeTraining("fsdp", 2, 0.010, factors=(1.1, 0.9) * 3 + (5.0,) + (0.9, 1.1) * 3)
    session, _ = _run([single, ddp, fsdp], max_trials=12)
    done = remeasure(session)
    assert [len(session.results[c.key].trials) for c in (single, ddp, fsdp)] == [5, 12, 12]
    flags = session.results[fsdp.key].disturbed
    assert flags[6] is not None and flags[6]["replaced"] and done.replaced == 1
    assert session.results[fsdp.key].trials[6].value == pytest.approx(0.010 * 1.1)


@pytest.mark.parametrize(
    ("raw", "seconds"), [("90s", 90.0), ("10m", 600.0), ("1h", 3600.0), ("1.5h", 5400.0), (" 2m ", 120.0)]
)
def test_budgets(raw, seconds):
    assert parse_budget("--budget", raw) == seconds


@pytest.mark.parametrize("raw", ["10", "10 minutes", "0s", "-1m", "1d", ""])
def test_a_budget_that_does_not_parse_names_the_accepted_forms(raw):
    with pytest.raises(ValueError, match=r"^--budget: expected a duration such as 90s, 10m, 1h, found "):
        parse_budget("--budget", raw)


def test_a_maximum_below_the_minimum_says_the_minimum():
    assert parse_max_trials("--max-trials", "5") == 5
    assert parse_max_trials("--max-trials", "3") == 3
    with pytest.raises(
        ValueError, match=r"^--max-trials: expected an int >= 3 \(the fewest pairs a claim .*found '2'$"
    ):
        parse_max_trials("--max-trials", "2")


class _Options:
    def __init__(self, **values):
        self.values = values

    def getoption(self, name, default=None):
        return self.values.get(name, default)


def test_the_suites_options_until_settled():
    from dpbench.measure.plugin.session import _settling

    assert _settling(_Options()) is None  # a fixed design unless asked
    plan = _settling(_Options(dpbench_until_settled=True, dpbench_max_trials="8", dpbench_budget="10m"))
    assert (plan.plan.min_trials, plan.plan.max_trials, plan.budget_s) == (5, 8, 600.0)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"dpbench_until_settled": True, "dpbench_trials": "3"}, "--dpbench-trials: a fixed number of trials, found"),
        ({"dpbench_until_settled": True, "dpbench_max_trials": "2"}, "--dpbench-max-trials: expected an int >= 3"),
        ({"dpbench_until_settled": True, "dpbench_budget": "ten"}, "--dpbench-budget: expected a duration such as"),
        ({"dpbench_budget": "10m"}, "--dpbench-budget: expected it with --dpbench-until-settled, found it alone"),
    ],
)
def test_the_suites_options_refuse_what_contradicts_or_does_not_parse(options, message):
    from dpbench.measure.plugin.session import _settling

    with pytest.raises(ValueError, match="^" + message):
        _settling(_Options(**options))


def test_a_question_the_re_measurement_reopens_gets_more_passes():
    # ddp and fsdp are level after 5 passes (their 5 pairs' interval just inside ±5%), and single is
    # slower. Pass 4 disturbed both (2.5x); measured again, disturbed again: left out, the two have
    # 4 pairs, whose wider interval no longer fits the margin. The design goes on for the cases it
    # reopened (not single, whose claim stands), and the question settles at the next look (8).
    single = FakeTraining("single", 1, 0.040)
    ddp = FakeTraining("ddp", 2, 0.010, factors=(1.0, 1.03, 0.97, 2.5, 1.0, 2.5) + WOBBLE * 4)
    fsdp = FakeTraining("fsdp", 2, 0.010, factors=(1.0, 1.0, 1.0, 2.5, 1.0, 2.5) + WOBBLE * 4)
    session, lines = _run([single, ddp, fsdp], max_trials=12)
    assert session.passes == 5 and session.stopped == "settled"
    remeasure(session)
    assert [session.results[c.key].left_out[3] for c in (single, ddp, fsdp)] == [False, True, True]
    assert session.reopened()
    session.run(resume=True)
    assert session.passes == 8 and session.stopped == "settled", lines[-1]
    assert [len(c.calls) for c in (single, ddp, fsdp)] == [5, 9, 9]  # 8 passes and the re-measurement
    assert [t.trial for t in session.results[ddp.key].trials] == list(range(8))
    assert not session.reopened()


@dataclass
class LongSpecTraining(FakeTraining):
    """A case labelled as the suites label it: its workload spec in its name."""

    workload: str = "hf:gpt2@" + ",".join(f"n_extra_{i}={i}" for i in range(100))  # ~1,500 characters

    @property
    def label(self):
        return f"{self.strategy}-{self.workload}-w{self.world_size} (batch {self.global_batch})"


def test_the_stop_line_names_a_long_spec_once_by_what_it_builds_and_a_hash():
    single = LongSpecTraining("single", 1, 0.020)
    ddp = LongSpecTraining("ddp", 2, 0.010)
    fsdp = LongSpecTraining("fsdp", 2, 0.010, factors=(1.1, 0.9), options={"reshard_after_forward": False})
    session, lines = _run([single, ddp, fsdp], max_trials=12)
    label = workload_label(single.workload)
    assert label.startswith("hf:gpt2@…#") and len(label) == len("hf:gpt2@…#") + 6
    assert lines[-1] == (
        f"the trials stopped at their maximum (12); still unsettled: {label} (sgd · fp32 · global batch 64): "
        "ddp w2, fsdp(reshard_after_forward=False) w2; about 31 more trials each would settle them (~0 s)"
    )


def test_a_busy_leader_is_named_as_its_question_names_it_in_the_stop_line():
    busy = {"devices": {"cpu": {"cpu_pct_mean": 90.0}, "pid:1": {"cpu_pct_mean": 20.0}}}  # others: 80% of 2 cores

    @dataclass
    class Busy(LongSpecTraining):
        def measure_trial(self, profile, **kw):
            result = super().measure_trial(profile, **kw)
            result.sampler = busy
            return result

    ddp = Busy("ddp", 2, 0.005)  # the leader, on a busy machine: the question stays open
    _, lines = _run([LongSpecTraining("single", 1, 0.010), ddp], max_trials=6)
    assert lines[-1] == (
        "the trials stopped at their maximum (6); still unsettled: "
        f"{workload_label(ddp.workload)} (sgd · fp32 · global batch 64): ddp w2, single w1; other processes used "
        "80% of the CPUs during ddp w2's trials: a quieter machine would settle them"
    )
