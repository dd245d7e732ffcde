"""A training case's GPU energy (dpbench.measure.energy) from fabricated sampler summaries: each trial's
counter difference over its timed window per sample and per second (a GPU two ranks share counted
once), the median over the trials kept with its spread beside the session's idle draw, and on CPU —
or with a stalled counter, or ranks on other nodes — absent with the reason, never zero. The same
record in ``extra_info`` (schema: ``energy``, ``sampled_window``) from a fabricated case result."""

from __future__ import annotations

import math
import statistics

import pytest

from dpbench.launcher.run_info import RunInfo
from dpbench.launcher.step_stats import StepStats
from dpbench.measure import TrainingCase, resolve_profile, training_extra_info
from dpbench.measure.cases import TrainingDetail
from dpbench.measure.energy import energy_info, idle_power, trial_energy, window_info
from dpbench.measure.trials import CaseResult, TrialResult
from dpbench.schema import EXTRA_INFO_FIELDS, EnergyGap
from tests.sampler.fake_nvml import FakeNvml, three_gpus

IDLE = {"devices": {"cuda:0": {"w": 60.0, "absent": None}, "cuda:1": {"w": 58.0, "absent": None}}, "absent": None}


def _gpu(joules: float | None, window: float = 2.5, absent: str | None = None, held: float = 0.0) -> dict:
    return {"energy_j": joules, "energy_window_s": window, "energy_absent": absent, "energy_held_s": held}


def _summary(**gpus: dict) -> dict:
    return {"devices": {"cpu": {"samples": 10}, **{label.replace("_", ":"): g for label, g in gpus.items()}}}


def test_a_trials_energy_is_the_counters_difference_per_sample_and_per_second_over_its_gpus():
    # Two GPUs, 500 J and 450 J over 2.5 s, while the timed rounds trained 4 rounds × 100 steps × 64 samples.
    record = trial_energy(_summary(cuda_0=_gpu(500.0), cuda_1=_gpu(450.0)), samples=25_600)
    assert record["joules"] == 950.0 and record["window_s"] == 2.5 and record["devices"] == ["cuda:0", "cuda:1"]
    assert record["j_per_sample"] == 950.0 / 25_600 and record["avg_w"] == 380.0 and record["absent"] is None


def test_on_cpu_a_trials_energy_is_absent_with_the_reason_never_zero():
    record = trial_energy(_summary(), samples=25_600)  # the CPU backend: no cuda rows at all
    assert record["absent"] == EnergyGap.NO_COUNTER.value
    assert record["joules"] is None and record["j_per_sample"] is None and record["avg_w"] is None


def test_one_gpu_whose_counter_stalled_leaves_the_trial_absent_not_partial():
    stalled = _gpu(None, window=2.5, absent=EnergyGap.STALLED.value, held=2.5)
    record = trial_energy(_summary(cuda_0=_gpu(500.0), cuda_1=stalled), samples=25_600)
    assert (record["absent"], record["absent_device"], record["held_s"]) == ("stalled", "cuda:1", 2.5)
    assert record["joules"] is None and record["j_per_sample"] is None


def test_ranks_on_other_nodes_leave_the_energy_absent():
    record = trial_energy(_summary(cuda_0=_gpu(500.0)), samples=25_600, nodes=2)
    assert record["absent"] == EnergyGap.OTHER_NODES.value and record["j_per_sample"] is None


def test_a_case_reports_the_median_over_trials_kept_its_spread_and_the_idle_draw_beside():
    joules = [950.0, 1000.0, 900.0, 5000.0]  # the last trial was disturbed and is left out
    records = [trial_energy(_summary(cuda_0=_gpu(j / 2), cuda_1=_gpu(j / 2)), samples=25_600) for j in joules]
    info = energy_info(records, left_out=[False, False, False, True], idle=IDLE)
    per_sample = [j / 25_600 for j in joules[:3]]
    assert info["j_per_sample"] == statistics.median(per_sample) == 950.0 / 25_600
    assert info["j_per_sample_cv"] == pytest.approx(statistics.stdev(per_sample) / statistics.fmean(per_sample))
    assert info["avg_w"] == 380.0 and info["avg_w_cv"] == pytest.approx(info["j_per_sample_cv"])
    assert (info["idle_w"], info["idle_absent"], info["absent"], info["trials_read"]) == (118.0, None, None, 3)
    assert info["trials"] == records  # every slot's own record, the disturbed one's included


def test_a_cpu_case_is_absent_with_the_reason_and_no_idle_draw():
    records = [trial_energy(_summary(), samples=640) for _ in range(3)]
    info = energy_info(records, left_out=[False] * 3, idle=None)
    assert (info["j_per_sample"], info["avg_w"], info["idle_w"]) == (None, None, None)
    assert info["absent"] == info["idle_absent"] == EnergyGap.NO_COUNTER.value and info["trials_read"] == 0


def test_cases_whose_trials_record_no_energy_have_none():
    assert energy_info([None, None], left_out=[False, False], idle=IDLE) is None


def test_the_sampled_window_flags_each_short_trial():
    long = {"gpu_window": {"window_s": 2.6, "needed_s": 2.0, "short": False}}
    short = {"gpu_window": {"window_s": 0.4, "needed_s": 2.0, "short": True}}
    assert window_info([long, short]) == {"needed_s": 2.0, "window_s": [2.6, 0.4], "short": [False, True]}
    assert window_info([{"gpu_window": None}, {}]) is None  # CPU: nothing judged


def test_without_nvml_the_idle_baseline_is_absent_with_the_reason(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    no_gpu = FakeNvml([])  # NVML starts and finds no GPU: the CPU backend
    assert idle_power(seconds=0.01, nvml=no_gpu) == {"devices": {}, "window_s": None, "absent": "no_counter"}


def test_an_idle_baseline_shorter_than_the_counter_needs_is_absent_per_gpu(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    idle = idle_power(seconds=0.3, nvml=FakeNvml(three_gpus()))
    assert sorted(idle["devices"]) == ["cuda:0", "cuda:1", "cuda:2"]
    assert {d["absent"] for d in idle["devices"].values()} == {EnergyGap.SHORT_WINDOW.value}
    assert all(d["w"] is None for d in idle["devices"].values())


@pytest.mark.slow
def test_an_idle_baseline_reads_each_gpus_draw_from_its_counter(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    # The fake counter moves 500 mJ a read, a read every 0.25 s: 2 W.
    idle = idle_power(seconds=2.3, nvml=FakeNvml(three_gpus()))
    assert {label: d["absent"] for label, d in idle["devices"].items()} == dict.fromkeys(["cuda:0", "cuda:1", "cuda:2"])
    assert all(d["w"] == pytest.approx(2.0, rel=0.1) for d in idle["devices"].values())


# ---------------------------------------------------------------- extra_info, from a fabricated result
def _trial(i: int, joules: float | None, window: dict | None) -> TrialResult:
    info = RunInfo(
        strategy="ddp", options={}, workload="mlp", workload_params={}, world_size=2, device_type="cuda",
        backend="gloo", global_batch=64, per_replica_batch=[32, 32], threads_per_worker=1, seed=0, lr=0.05,
        devices=["cuda:0", "cuda:0"], processes=2, timeout=60.0, workers=[], affinity=None, nodes=1,
        ranks_per_node=2, hosts=["h"],
    )  # fmt: skip
    stats = StepStats(step_times=[0.002] * 400, global_batch=64, losses=[1.0])
    summary = {**_summary(cuda_0=_gpu(joules, absent=None if joules else "short_window")), "gpu_window": window}
    energy = trial_energy(summary, samples=400 * 64)
    return TrialResult(
        trial=i, order=i, started_at=0.0, steps_per_round=200, round_times=[0.002, 0.002], unit_times=[0.002] * 400,
        control_s=0.1, sampler=summary, detail=TrainingDetail(run_info=info, step_stats=stats, energy=energy),
    )  # fmt: skip


def test_extra_info_carries_the_energy_and_the_sampled_window(monkeypatch):
    # The model's sizes are another test's (test_model_sizes.py): not built here.
    monkeypatch.setattr("dpbench.measure.extra_info.workload_sizes", lambda workload, profile: (None, None))
    window = {"window_s": 0.8, "needed_s": 2.0, "short": True}
    trials = [_trial(0, 512.0, None), _trial(1, 480.0, None), _trial(2, None, window)]
    profile = resolve_profile(cuda_count=1, cpu_count=16, environ={})
    case = TrainingCase(strategy="ddp", workload="mlp", world_size=2, global_batch=64)
    result = CaseResult(key="ddp-mlp-w2", trials=trials)
    info = training_extra_info(case=case, result=result, profile=profile, suite="throughput", idle_power=IDLE)
    assert {"energy", "sampled_window"} <= set(EXTRA_INFO_FIELDS) and {"energy", "sampled_window"} <= set(info)
    energy = info["energy"]
    # Two GPU ranks share cuda:0: its counter once. The third trial's window was short: left unread.
    assert energy["j_per_sample"] == statistics.median([512.0 / 25_600, 480.0 / 25_600]) and energy["trials_read"] == 2
    assert energy["idle_w"] == 60.0 and energy["devices"] == ["cuda:0"]
    assert energy["trials"][2]["absent"] == "short_window" and math.isnan(
        energy["trials"][2]["j_per_sample"] or math.nan
    )
    assert info["sampled_window"] == {"needed_s": 2.0, "window_s": [None, None, 0.8], "short": [False, False, True]}
