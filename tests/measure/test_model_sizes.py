"""extra_info's parameter_count and buffer_bytes: the case's model counted on the meta device,
against the same model built for real and counted directly."""

from __future__ import annotations

import pytest

from dpbench.measure import TrainingCase, resolve_profile, training_extra_info
from dpbench.measure.extra_info import workload_sizes
from dpbench.measure.trials import CaseResult
from dpbench.workloads import resolve_workload

SMALL_RESNET = "resnet18@widths=2x2x2x2"


def _direct(spec: str) -> tuple[int, int]:
    model = resolve_workload(spec).model()
    return sum(p.numel() for p in model.parameters()), sum(b.numel() * b.element_size() for b in model.buffers())


def _profile():
    return resolve_profile(cuda_count=0, cpu_count=2, environ={"DPBENCH_PROFILE": "quick"})


@pytest.mark.parametrize("spec", [SMALL_RESNET, "mlp"])
def test_sizes_are_the_built_models(spec):
    params, buffers = workload_sizes(spec, _profile())
    assert (params, buffers) == _direct(spec)
    # BatchNorm's running mean and variance (fp32) and its batch count (int64); the mlp has none
    assert (buffers > 0) == (spec == SMALL_RESNET)


def test_a_model_the_meta_device_cannot_build_leaves_both_out():
    assert workload_sizes("no_such_workload", _profile()) == (None, None)


@pytest.mark.slow
def test_a_real_case_records_its_buffer_bytes():
    profile = _profile()
    case = TrainingCase(strategy="single", workload=SMALL_RESNET, world_size=1, global_batch=2)
    trial = case.measure_trial(profile, trial=0, steps_per_round=1, timeline=None, first=False)
    result = CaseResult(key=case.key, trials=[trial], case_metrics=trial.case_metrics)
    info = training_extra_info(case=case, result=result, profile=profile, suite="throughput")
    assert (info["parameter_count"], info["buffer_bytes"]) == _direct(SMALL_RESNET)
