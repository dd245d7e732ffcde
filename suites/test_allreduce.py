"""Suite 4 — hand-written allreduce (per-param, bucketed, overlap) against DDP on the same
workload, world size and batches. ``relative_to_ddp`` = allreduce step time / DDP step time."""
from __future__ import annotations

from dpbench.schema import StrategyName
from dpbench.suite import TrainingCase, measure_training

MODES = ("per-param", "bucketed", "overlap")


def pytest_generate_tests(metafunc):
    if "case" not in metafunc.fixturenames:
        return
    profile = metafunc.config._dpbench_profile
    world = max(profile.world_sizes)
    workload = profile.knob_workload
    cases = [TrainingCase(strategy=StrategyName.DDP.value, workload=workload, world_size=world,
                          global_batch=profile.global_batch)]
    cases += [TrainingCase(strategy=StrategyName.ALLREDUCE.value, workload=workload, world_size=world,
                           global_batch=profile.global_batch, options={"mode": mode}) for mode in MODES]
    metafunc.parametrize("case", cases, ids=[c.id for c in cases])


def test_allreduce_vs_ddp(benchmark, case, profile, timelines, baselines, unavailable_to_skip):
    benchmark.group = f"allreduce-vs-ddp-{case.workload}"
    with unavailable_to_skip:
        info, _ = measure_training(benchmark, case, profile=profile, suite="allreduce",
                                   timeline_path=timelines.path_for)
    key = ("ddp-step-time", case.workload, case.world_size)
    if case.strategy == StrategyName.DDP.value:
        baselines[key] = info["step_time_p50"]
    elif key in baselines:
        benchmark.extra_info["relative_to_ddp"] = info["step_time_p50"] / baselines[key]
    assert info["step_time_p50"] > 0
