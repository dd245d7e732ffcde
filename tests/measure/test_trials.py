"""dpbench.measure.trials: the interleaved schedule and its failure rules;
dpbench.measure.cases: one real trial of each kind of case."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

import pytest

from dpbench.measure import resolve_profile
from dpbench.measure.cases import CollectiveCase, TrainingCase
from dpbench.measure.trials import TrialResult, TrialSession, advance_worker_clock, worker_clock


class Unavailable(RuntimeError):
    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


@dataclass
class FakeCase:
    name: str
    log: list
    fail_on_trial: int | None = None
    unavailable: bool = False
    interrupt: bool = False
    calls: list = field(default_factory=list)

    @property
    def key(self):
        return self.name

    @property
    def label(self):
        return self.name

    def measure_trial(self, profile, *, trial, steps_per_round, timeline, first):
        self.log.append((trial, self.name))
        self.calls.append({"trial": trial, "k": steps_per_round, "first": first})
        if self.interrupt:
            raise KeyboardInterrupt
        if self.unavailable:
            raise Unavailable(f"{self.name} cannot run here")
        if trial == self.fail_on_trial:
            raise RuntimeError(f"{self.name} broke in trial {trial}")
        value = 0.01 * (trial + 1)
        return TrialResult(
            trial=trial,
            order=-1,
            started_at=math.nan,
            steps_per_round=steps_per_round or 7,
            round_times=[value],
            unit_times=[value, value],
            control_s=0.001,
            case_metrics={"flops": 1} if first else None,
        )


def _session(trials=3):
    return TrialSession(profile=None, trials=trials, unavailable=(Unavailable,))


def test_trials_are_interleaved_trial_major_and_each_case_measured_once():
    log: list = []
    session = _session(3)
    a, b, c = FakeCase("a", log), FakeCase("b", log), FakeCase("c", log)
    for case in (a, b, a, c):  # "a" named by two suites: one configuration, measured once per trial
        session.add(case)
    session.run()
    assert log == [(t, n) for t in range(3) for n in "abc"]
    result = session.result("a")
    assert [t.trial for t in result.trials] == [0, 1, 2]
    assert [t.order for t in result.trials] == [0, 3, 6]  # the global schedule position
    # Every trial of a case does the same work: k from the first trial is reused.
    assert [call["k"] for call in a.calls] == [None, 7, 7] and [call["first"] for call in a.calls] == [
        True,
        False,
        False,
    ]
    assert result.case_metrics == {"flops": 1}
    assert result.values == [0.01, 0.02, 0.03] and result.controls == [0.001] * 3


def test_between_passes_runs_before_every_trial_pass_and_never_inside_one():
    log: list = []
    session = TrialSession(profile=None, trials=3, between_passes=lambda: log.append("fresh"), worker_start="how")
    for name in "ab":
        session.add(FakeCase(name, log))
    session.run()
    assert log == ["fresh", (0, "a"), (0, "b"), "fresh", (1, "a"), (1, "b"), "fresh", (2, "a"), (2, "b")]
    assert session.result("a").worker_start == "how" and session.result("b").worker_start == "how"
    empty: list = []
    TrialSession(profile=None, trials=2, between_passes=lambda: empty.append("fresh")).run()
    assert empty == []  # nothing scheduled: nothing to restart


def test_an_unavailable_case_is_skipped_and_a_failing_one_is_not_tried_again():
    log: list = []
    session = _session(3)
    ok, gone, broken = (
        FakeCase("ok", log),
        FakeCase("gone", log, unavailable=True),
        FakeCase("broken", log, fail_on_trial=1),
    )
    for case in (ok, gone, broken):
        session.add(case)
    session.run()
    assert session.result("gone").skip_reason == "gone cannot run here" and not session.result("gone").trials
    assert len(gone.calls) == 1
    broken_result = session.result("broken")
    assert isinstance(broken_result.error, RuntimeError) and broken_result.failed_trial == 1
    assert len(broken.calls) == 2 and len(broken_result.trials) == 1
    assert len(session.result("ok").trials) == 3  # the others are not affected


def test_keyboard_interrupt_stops_the_session():
    log: list = []
    session = _session(2)
    session.add(FakeCase("a", log))
    session.add(FakeCase("b", log, interrupt=True))
    session.add(FakeCase("c", log))
    with pytest.raises(KeyboardInterrupt):
        session.run()
    assert log == [(0, "a"), (0, "b")]


@pytest.mark.parametrize("bad", [0, -1, 1.5, "3", True])
def test_bad_trial_counts(bad):
    with pytest.raises(ValueError, match="trials must be an int >= 1"):
        TrialSession(profile=None, trials=bad)


def test_unknown_case_key_names_it():
    with pytest.raises(KeyError, match="not scheduled"):
        _session().result("nope")


def test_worker_clock_moves_only_when_told():
    start = worker_clock()
    assert worker_clock() == start
    advance_worker_clock(0.25)
    assert worker_clock() == pytest.approx(start + 0.25)
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError):
            advance_worker_clock(bad)


def test_training_case_key_uses_resolved_options():
    plain = TrainingCase(strategy="allreduce", workload="mlp", world_size=2, global_batch=64)
    explicit = TrainingCase(
        strategy="allreduce", workload="mlp", world_size=2, global_batch=64, options={"mode": "bucketed"}
    )  # the default mode
    other = TrainingCase(
        strategy="allreduce", workload="mlp", world_size=2, global_batch=64, options={"mode": "overlap"}
    )
    assert plain.key == explicit.key != other.key
    assert plain.key != TrainingCase(strategy="allreduce", workload="mlp", world_size=2, global_batch=32).key
    assert CollectiveCase(collective="all_reduce", size_bytes=4096, world_size=2).key != plain.key


@pytest.mark.slow
def test_one_real_training_trial_measures_in_the_workers():
    profile = resolve_profile(cuda_count=0, cpu_count=2, environ={"DPBENCH_PROFILE": "quick"})
    case = TrainingCase(strategy="ddp", workload="mlp", world_size=2, global_batch=16)
    trial = case.measure_trial(profile, trial=0, steps_per_round=3, timeline=None, first=False)
    assert trial.steps_per_round == 3 and len(trial.round_times) == profile.rounds
    assert len(trial.unit_times) == 3 * profile.rounds
    # Each round's value is the mean of its own steps, as the workers timed them.
    for i, value in enumerate(trial.round_times):
        assert value == pytest.approx(statistics.fmean(trial.unit_times[3 * i : 3 * i + 3]))
    # The sampler ticks during the timed rounds and takes one final sample when stopped.
    assert trial.control_s > 0 and trial.sampler["sample_count"] >= 1
    assert trial.detail.run_info.strategy == "ddp"


@pytest.mark.slow
def test_one_real_collective_trial_times_calls_in_the_workers():
    profile = resolve_profile(cuda_count=0, cpu_count=2, environ={"DPBENCH_PROFILE": "quick"})
    case = CollectiveCase(collective="all_reduce", size_bytes=4096, world_size=2)
    trial = case.measure_trial(profile, trial=0, steps_per_round=None, timeline=None, first=True)
    assert trial.steps_per_round == profile.comm_iters
    assert len(trial.unit_times) == profile.comm_iters * profile.rounds and trial.value > 0
    assert trial.control_s > 0 and trial.detail.backend == "gloo"


def test_progress_counts_only_the_slots_still_to_run():
    # "b" cannot run: its first slot is tried (and counted done), its later ones are not in the ETA.
    log: list = []
    said: list = []
    session = TrialSession(
        profile=None,
        trials=2,
        unavailable=(Unavailable,),
        progress=lambda text, **kw: said.append((text.split(" · ")[1], kw.get("done"), kw.get("total"))),
    )
    for case in (FakeCase("a", log), FakeCase("b", log, unavailable=True), FakeCase("c", log)):
        session.add(case)
    session.run()
    assert said == [("1/6", 0, 6), ("2/6", 1, 6), ("3/6", 2, 5), ("4/6", 3, 5), ("6/6", 4, 5)]
