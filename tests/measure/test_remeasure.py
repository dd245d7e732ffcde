"""dpbench.measure.remeasure: disturbed trials found by their control or their step time, measured
again in one bounded pass, kept in the results, marked, and left out of the estimates."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest

from dpbench.measure.extra_info import publish, trials_info
from dpbench.measure.remeasure import plan, remeasure
from dpbench.measure.trials import TrialResult, TrialSession
from dpbench.stats import REMEASURE_SHARE, paired_ratio

CLEAN_CONTROL = 0.001


@dataclass
class ScriptedCase:
    """A case whose trials return scripted (step time, control) pairs: call n gets script[n]."""

    name: str
    script: list[tuple[float, float]]
    calls: list = field(default_factory=list)

    @property
    def key(self):
        return self.name

    @property
    def label(self):
        return self.name

    def measure_trial(self, profile, *, trial, steps_per_round, timeline, first):
        value, control = self.script[len(self.calls)]
        self.calls.append(trial)
        return TrialResult(
            trial=trial,
            order=-1,
            started_at=math.nan,
            steps_per_round=5,
            round_times=[value],
            unit_times=[value] * 3,
            control_s=control,
            placement="one-host",
        )


def _clean(base: float, n: int = 5, wobble=(1.0, 1.04, 0.97, 1.02, 0.99, 1.01)) -> list[tuple[float, float]]:
    return [(base * wobble[i % len(wobble)], CLEAN_CONTROL * wobble[(i + 2) % len(wobble)]) for i in range(n)]


def _session(cases, trials=5):
    session = TrialSession(profile=None, trials=trials)
    for case in cases:
        session.add(case)
    session.run()
    return session


def test_a_disturbed_trial_is_found_by_its_control_measured_again_and_replaced():
    script = _clean(0.010)
    script[1] = (0.216, 10 * CLEAN_CONTROL)  # the real run's single trial: 20x slower, its control 10x
    single = ScriptedCase("single", script + [(0.0101, CLEAN_CONTROL)])  # call 6: the re-measurement
    ddp = ScriptedCase("ddp", _clean(0.011))
    others = [ScriptedCase(f"c{i}", _clean(0.02 + 0.001 * i)) for i in range(4)]
    session = _session([single, ddp, *others])
    before = paired_ratio(session.result("single").values, session.result("ddp").values)
    assert before.ratio == pytest.approx(0.010 * 0.97 / (0.011 * 0.97), rel=0.1)  # the median already ignores it
    done = remeasure(session)
    assert (done.trials, done.disturbed, done.measured_again, done.replaced, done.busy) == (30, 1, 1, 1, None)
    assert single.calls == [0, 1, 2, 3, 4, 1]  # slot 1 measured again, once
    result = session.result("single")
    flag = result.disturbed[1]
    assert flag["replaced"] and "control" in flag["why"] and "10.0x" in flag["why"]
    assert flag["measured"]["step_time_s"] == 0.216 and flag["measured"]["control_s"] == 10 * CLEAN_CONTROL
    assert result.values[1] == 0.0101 and result.left_out == [False] * 5
    assert result.trials[1].order == 30  # after every planned trial
    saved = trials_info(result)
    assert saved["step_time_s"][1] == 0.0101 and saved["disturbed"][1]["left_out"] is False
    assert [f is None for f in saved["disturbed"]] == [True, False, True, True, True]
    after = paired_ratio(result.values, session.result("ddp").values)
    assert after.ratio == pytest.approx(10 / 11, rel=0.05) and after.hi / after.lo < 1.2


def test_a_blind_control_is_caught_by_the_step_time_and_a_disturbed_remeasurement_is_not_taken():
    script = _clean(0.014)
    script[1] = (0.216, CLEAN_CONTROL)  # the control ran after the disturbance: only the step time says so
    dp = ScriptedCase("dp", script + [(0.300, CLEAN_CONTROL)])  # ... and the second try is disturbed too
    others = [ScriptedCase(f"c{i}", _clean(0.02 + 0.001 * i)) for i in range(5)]
    session = _session([dp, *others])
    done = remeasure(session)
    assert (done.disturbed, done.measured_again, done.replaced) == (1, 1, 0)
    result = session.result("dp")
    flag = result.disturbed[1]
    assert "step time" in flag["why"] and "did not see it" in flag["why"] and not flag["replaced"]
    assert flag["remeasured"]["step_time_s"] == 0.300 and "step time" in flag["remeasured"]["why"]
    # Not replaced: left out of every estimate (4 trials remain), its slot NaN so pairs stay aligned.
    assert result.left_out == [False, True, False, False, False] and math.isnan(result.values[1])
    assert result.kept == [v for i, v in enumerate(result.measured_values) if i != 1]
    assert trials_info(result)["step_time_s"][1] == 0.216  # the disturbed trial stays in the results


def test_the_pass_is_bounded_and_a_busy_machine_is_said():
    cases = []
    for i in range(6):
        script = _clean(0.02 + 0.001 * i)
        script[i % 5] = (script[i % 5][0], 5 * CLEAN_CONTROL)  # every case: one disturbed trial (20%)
        script[(i + 2) % 5] = (script[(i + 2) % 5][0], 4 * CLEAN_CONTROL)  # ... and a second (40% in all)
        cases.append(ScriptedCase(f"c{i}", script + _clean(0.02 + 0.001 * i, 6)))
    session = _session(cases)
    assert len(plan(session.results)) == 0  # nothing judged yet
    done = remeasure(session)
    assert done.disturbed == 12 and done.measured_again == math.floor(REMEASURE_SHARE * 30) == 6
    assert done.replaced == 6
    assert done.busy == (
        "the machine was busy during 40% of the trials (12 of 30, 6 of them not measured again): results are unreliable"
    )


def test_publish_hands_pytest_benchmark_only_the_kept_trials():
    script = _clean(0.014)
    script[1] = (0.216, CLEAN_CONTROL)
    dp = ScriptedCase("dp", script + [(0.300, CLEAN_CONTROL)])
    session = _session([dp, *[ScriptedCase(f"c{i}", _clean(0.02 + 0.001 * i)) for i in range(5)]])
    remeasure(session)
    result = session.result("dp")

    class Bench:
        rounds: list = []

        def pedantic(self, fn, *, setup, rounds, iterations, warmup_rounds):
            for _ in range(rounds):
                setup()
                fn()
            Bench.rounds.append(rounds)

    publish(Bench(), result)
    assert Bench.rounds == [4]


def test_a_machine_busy_all_run_long_is_said_even_when_no_trial_stands_out():
    """Controls all over the place (a machine shared the whole run): limits from that spread alone
    would flag nothing, so the caps flag what is twice its median and the run says it is unreliable."""
    spread = (1.0, 3.0, 0.4, 6.0, 1.5, 0.7, 2.5, 0.3, 4.0, 1.2)
    cases = []
    for i in range(6):
        script = [(0.02 * spread[(i + j) % 10], CLEAN_CONTROL * spread[(i + j + 3) % 10]) for j in range(5)]
        cases.append(ScriptedCase(f"c{i}", script + script))
    session = _session(cases)
    done = remeasure(session)
    assert done.busy is not None and "results are unreliable" in done.busy
    assert done.busy.startswith("the machine was busy")


@pytest.mark.parametrize(("machine_pct", "said"), [(51.0, False), (90.0, True)], ids=["quiet", "neighbour"])
def test_the_sessions_busy_throughout_line_needs_the_sampler_to_see_other_processes(monkeypatch, machine_pct, said):
    """Controls spread ±65%: the session says the machine was busy throughout only where the sampler
    saw other processes use more than a fifth of it (its own worker took one core of two: 50%)."""
    import os

    from dpbench.measure.remeasure import busy_line
    from dpbench.measure.trials import CaseResult
    from dpbench.stats import DisturbanceLimits

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    sampler = {"devices": {"cpu": {"cpu_pct_mean": machine_pct}, "pid:7": {"cpu_pct_mean": 100.0}}}
    trials = [
        TrialResult(
            trial=i,
            order=i,
            started_at=math.nan,
            steps_per_round=5,
            round_times=[0.01],
            unit_times=[0.01],
            control_s=1e-3,
            sampler=sampler,
        )
        for i in range(5)
    ]
    results = {"a": CaseResult(key="a", trials=trials)}
    limits = DisturbanceLimits(control_median={}, control_limit=2.0, trial_limit=3.0, control_spread=0.5)
    line = busy_line(results, limits=limits)
    expected = "the machine was busy throughout: the controls spread by ±65% (robust sd), 0 of 5 trials stood out"
    assert (line is not None and line.startswith(expected)) if said else line is None
