"""A trial records the case's fingerprint once, in its first trial, as extra_info["fingerprint"]."""

from __future__ import annotations

import pytest

from dpbench.measure import TrainingCase, resolve_profile, training_extra_info
from dpbench.measure.cases import FINGERPRINT_LOSSES, PROBE_STEPS
from dpbench.measure.trials import CaseResult
from dpbench.results.fingerprint import FingerprintStatus, compare_fingerprints


def measured(strategy: str, world_size: int, *, first: bool = True):
    profile = resolve_profile(cuda_count=0, cpu_count=2, environ={"DPBENCH_PROFILE": "quick"})
    case = TrainingCase(strategy=strategy, workload="mlp", world_size=world_size, global_batch=16)
    trial = case.measure_trial(profile, trial=0, steps_per_round=2, timeline=None, first=first)
    result = CaseResult(key=case.key, trials=[trial], case_metrics=trial.case_metrics)
    return trial, training_extra_info(case=case, result=result, profile=profile, suite="throughput")


@pytest.mark.slow
def test_the_first_trial_records_the_fingerprint_and_ddp_matches_single():
    _, single = measured("single", 1)
    trial, ddp = measured("ddp", 2)
    record = ddp["fingerprint"]
    # The probe's steps, then the warm-up and timed rounds' losses, from the first step on.
    assert record["step"] == PROBE_STEPS and len(record["losses"]) == FINGERPRINT_LOSSES
    # Quick profile, 2 steps per round: probe (steps 1-2), one warm-up round (3-4), two timed rounds (5-8).
    assert record["losses"][4:] == trial.detail.step_stats.losses
    assert record["precision"] == "fp32" and record["exempt"] is None and record["rank_spread"] == 0.0
    verdict = compare_fingerprints(record, single["fingerprint"])
    assert verdict.status is FingerprintStatus.MATCHES, verdict.reason


@pytest.mark.slow
def test_later_trials_record_no_fingerprint():
    trial, info = measured("single", 1, first=False)
    assert trial.case_metrics is None and "fingerprint" not in info
