"""Convergence settings, cases and the ``extra_info["convergence"]`` they publish (no processes)."""

from __future__ import annotations

import math
import statistics

import pytest

from dpbench.launcher.run_info import RunInfo
from dpbench.launcher.step_stats import StepStats
from dpbench.measure.convergence import (
    ConvergenceCase,
    ConvergenceDetail,
    ConvergenceSettings,
    convergence_cases,
    convergence_info,
    resolve_convergence,
)
from dpbench.measure.trials import CaseResult, TrialResult
from dpbench.stats import log_t_interval


@pytest.mark.parametrize(
    "name, raw",
    [
        ("DPBENCH_EPOCHS", "0"),
        ("DPBENCH_EPOCHS", "-2"),
        ("DPBENCH_EPOCHS", "1.5"),
        ("DPBENCH_EPOCHS", "ten"),
        ("DPBENCH_TARGET_ACCURACY", "0"),
        ("DPBENCH_TARGET_ACCURACY", "1.01"),
        ("DPBENCH_TARGET_ACCURACY", "nan"),
        ("DPBENCH_TARGET_ACCURACY", "-0.5"),
        ("DPBENCH_TARGET_ACCURACY", "high"),
    ],
)
def test_bad_settings_are_refused_naming_the_variable(name, raw):
    with pytest.raises(ValueError, match=f"^{name} must be .*got '{raw}'$"):
        resolve_convergence({"DPBENCH_CONVERGENCE": "digits-mlp", name: raw})


def test_settings_read_recipes_epochs_target_and_the_data_directory():
    assert resolve_convergence({}) == ConvergenceSettings()
    settings = resolve_convergence(
        {
            "DPBENCH_CONVERGENCE": " d2l-lenet,digits-mlp ",
            "DPBENCH_EPOCHS": "3",
            "DPBENCH_TARGET_ACCURACY": "1",
            "DPBENCH_FASHION_MNIST": "/data/fm",
        }
    )
    assert settings == ConvergenceSettings(
        recipes=("d2l-lenet", "digits-mlp"), epochs=3, target_accuracy=1.0, fashion_mnist="/data/fm"
    )
    assert resolve_convergence({"DPBENCH_CONVERGENCE": "all"}).recipes == ("digits-mlp", "d2l-lenet", "d2l-resnet18")
    with pytest.raises(ValueError, match="unknown recipe\\(s\\) 'lenet'. Known names: digits-mlp, d2l-lenet"):
        resolve_convergence({"DPBENCH_CONVERGENCE": "lenet"})


def test_cases_follow_the_recipe_and_are_judged_against_single():
    cases = convergence_cases(ConvergenceSettings(recipes=("d2l-resnet18",), epochs=2, target_accuracy=0.5))
    assert [c.id for c in cases] == [
        "single-d2l-resnet18-w1",
        "manual-d2l-resnet18-w1",
        "manual-d2l-resnet18-w2",
        "dp-d2l-resnet18-w1",
        "dp-d2l-resnet18-w2",
        "torch-dp-d2l-resnet18-w1",
        "torch-dp-d2l-resnet18-w2",
        "ddp-d2l-resnet18-w1",
        "ddp-d2l-resnet18-w2",
    ]
    assert [(c.global_batch, c.lr) for c in cases if c.world_size == 2] == [(512, 0.2)] * 4
    assert all(c.epochs == 2 and c.target_accuracy == 0.5 for c in cases)
    assert cases[0].reference is None and all(c.reference == cases[0] for c in cases[1:])
    digits = convergence_cases(ConvergenceSettings(recipes=("digits-mlp",)))
    assert all(c.options == {"optimizer": "adamw"} and c.epochs == 10 for c in digits)
    assert len({c.key for c in digits}) == len(digits)


def test_a_case_refuses_bad_epochs_and_targets():
    with pytest.raises(ValueError, match="epochs must be an integer >= 1"):
        ConvergenceCase(recipe="digits-mlp", strategy="single", world_size=1, global_batch=64, lr=0.1, epochs=0)
    with pytest.raises(ValueError, match="target_accuracy must be a test accuracy in \\(0, 1\\]"):
        ConvergenceCase(
            recipe="digits-mlp", strategy="single", world_size=1, global_batch=64, lr=0.1, epochs=1, target_accuracy=1.5
        )


def _trial(i: int, curve: list[float], times: list[float]) -> TrialResult:
    epochs = [
        {
            "time_s": t,
            "wall_s": t + 0.01,
            "train_loss": 1.0 / (e + 1),
            "test_accuracy": a,
            "test_loss": 1 - a,
            "eval_s": 0.002,
            "eval_device": "cpu",
        }
        for e, (a, t) in enumerate(zip(curve, times))
    ]
    return TrialResult(
        trial=i,
        order=i,
        started_at=0.0,
        steps_per_round=22,
        round_times=[t / 22 for t in times],
        unit_times=[t / 22 for t in times],
        control_s=0.01,
        detail=ConvergenceDetail(
            run_info=_RUN_INFO,
            step_stats=StepStats(step_times=[t / 22 for t in times], global_batch=64),
            epochs=epochs,
            train_samples=1438,
            test_samples=359,
        ),
    )


# What launch() reports for a one-process run of the digits recipe (convergence_info reads none of it).
_RUN_INFO = RunInfo(
    strategy="single",
    options={},
    workload="digits-mlp",
    workload_params={},
    world_size=1,
    device_type="cpu",
    backend=None,
    global_batch=64,
    per_replica_batch=[64],
    threads_per_worker=1,
    seed=0,
    lr=0.1,
    devices=["cpu"],
    processes=1,
    timeout=300.0,
    workers=[],
    affinity=None,
    nodes=1,
    ranks_per_node=1,
    hosts=["localhost"],
)


def _case(strategy: str, reference=None) -> ConvergenceCase:
    return ConvergenceCase(
        recipe="digits-mlp",
        strategy=strategy,
        world_size=1 if strategy == "single" else 2,
        global_batch=64,
        lr=0.01,
        epochs=3,
        target_accuracy=0.9,
        reference=reference,
    )


def test_convergence_info_reports_curves_epoch_times_time_to_target_and_parity():
    single = _case("single")
    ddp = _case("ddp", reference=single)
    ref = CaseResult(key=single.key, trials=[_trial(0, [0.5, 0.8, 0.95], [1.0, 1.0, 1.0])])
    times = [[2.0, 1.0, 1.5], [2.5, 1.5, 2.0], [1.9, 1.1, 1.4]]
    result = CaseResult(key=ddp.key, trials=[_trial(i, [0.6, 0.91, 0.94], t) for i, t in enumerate(times)])
    info = convergence_info(ddp, result, ref)
    assert info["test_accuracy"] == [0.6, 0.91, 0.94] and info["deterministic"] is True
    assert info["final_test_accuracy"] == 0.94 and info["train_loss"] == [1.0, 0.5, 1 / 3]
    assert info["epoch_time_s"] == [2.0, 1.1, 1.5]  # per epoch, the median over trials
    means = [statistics.fmean(t) for t in times]
    assert info["sec_per_epoch"] == statistics.median(means) and info["sec_per_epoch_trials"] == means
    assert info["sec_per_epoch_ci95"] == list(log_t_interval(means))
    assert info["samples_per_epoch"] == 22 * 64
    assert info["epoch_samples_per_s"] == 22 * 64 / statistics.median(means)
    assert info["epochs_to_target"] == 2  # 0.91 is the first at or above 0.9
    assert info["time_to_target_trials"] == [3.0, 4.0, 3.0] and info["time_to_target_s"] == 3.0
    assert info["reference"] == "single-digits-mlp-w1"
    assert math.isclose(info["accuracy_gap_to_reference"], 0.94 - 0.95)
    assert math.isclose(info["max_curve_gap_to_reference"], 0.11)
    assert info["parity_tolerance"] == 3 / 359 and info["expected_accuracy"] == 0.95  # recipes.spread_tolerance


def test_a_curve_that_moves_between_trials_is_not_deterministic_and_a_missed_target_has_no_time():
    case = _case("single")
    result = CaseResult(
        key=case.key, trials=[_trial(0, [0.5, 0.6, 0.7], [1, 1, 1]), _trial(1, [0.5, 0.61, 0.7], [1, 1, 1])]
    )
    info = convergence_info(case, result)
    assert info["deterministic"] is False and info["test_accuracy_trials"][1] == [0.5, 0.61, 0.7]
    assert info["epochs_to_target"] is None and info["time_to_target_s"] is None
    assert info["reference"] is None and info["accuracy_gap_to_reference"] is None


class _FakeRun:
    """What ``launch`` returns, recording the order of its calls: losses and sums follow the step count."""

    pids: list[int] = []

    def __init__(self, *args, **kwargs):
        self.steps, self.calls, self.info = 0, [], _RUN_INFO

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def step(self, k):
        self.calls.append(("step", k))
        first, self.steps = self.steps, self.steps + k
        return StepStats(
            step_times=[0.01] * k, global_batch=64, losses=[2.0 - 0.001 * i for i in range(first, self.steps)]
        )

    def fingerprint(self):
        self.calls.append(("fingerprint", self.steps))
        return {"step": self.steps, "param_sum": float(self.steps), "param_count": 10, "rank_spread": 0.0}

    def evaluate(self, split):
        self.calls.append(("evaluate", self.steps))
        return {"accuracy": self.steps / 1000, "loss": 0.1, "samples": 359, "eval_s": 0.001, "device": "cpu"}

    def control(self):
        return 0.01


class _FakeSampler:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def summary(self):
        return {}


def test_a_convergence_case_takes_its_sums_after_the_probe_steps_and_records_its_final_accuracy(monkeypatch):
    # After thousands of SGD steps float-sized differences between clean configurations have grown
    # past any tolerance: the sums follow the probe's 2 steps, as a throughput case's do.
    pytest.importorskip("sklearn", reason="the digits recipe needs scikit-learn")
    import dpbench.launcher
    import dpbench.measure.cases
    from dpbench.measure.cases import PROBE_STEPS

    runs = []
    monkeypatch.setattr(dpbench.launcher, "launch", lambda *a, **k: runs.append(_FakeRun()) or runs[-1])
    monkeypatch.setattr(dpbench.measure.cases, "_sampled", lambda *a: _FakeSampler())
    profile = type("Profile", (), {"device": "cpu", "sample_interval": 0.1})()
    trial = _case("ddp").measure_trial(profile, trial=0, steps_per_round=None, timeline=None, first=True)
    (run,) = runs
    assert run.calls[:4] == [
        ("step", PROBE_STEPS),
        ("fingerprint", PROBE_STEPS),
        ("step", 22 - PROBE_STEPS),
        ("evaluate", 22),
    ]
    assert [c for c in run.calls if c[0] == "fingerprint"] == [("fingerprint", PROBE_STEPS)]
    record = trial.case_metrics["fingerprint"]
    assert record["step"] == PROBE_STEPS and record["losses"] == [2.0 - 0.001 * i for i in range(8)]
    assert record["final_test_accuracy"] == 3 * 22 / 1000 and record["accuracy_tolerance"] == 3 / 359
    # The epoch is still one epoch: its 22 step times, its mean loss, its wall time.
    assert trial.round_times == pytest.approx([0.01] * 3) and len(trial.unit_times) == 3 * 22
    assert trial.detail.epochs[0]["train_loss"] == pytest.approx(2.0 - 0.001 * 10.5)
    later = _case("ddp").measure_trial(profile, trial=1, steps_per_round=None, timeline=None, first=False)
    assert later.case_metrics is None and ("step", 22) in runs[-1].calls and "fingerprint" not in str(runs[-1].calls)
