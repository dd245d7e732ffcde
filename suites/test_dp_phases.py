"""Suite 5 — where DataParallel spends each step (scatter / replicate / apply / gather /
backward / optimizer), and peak memory per device (device 0 carries the gather and the
optimizer, so it is heavier than the others on GPUs)."""

from __future__ import annotations

from dpbench.measure import TrainingCase, measure_training
from dpbench.measure.plugin import session_of
from dpbench.schema import Phase, StrategyName

DP_PHASES = {Phase.SCATTER.value, Phase.REPLICATE.value, Phase.APPLY.value, Phase.GATHER.value}


def pytest_generate_tests(metafunc):
    if "case" not in metafunc.fixturenames:
        return
    profile = session_of(metafunc.config).profile
    world = max(profile.world_sizes)
    cases = [
        TrainingCase(
            strategy=StrategyName.DP.value, workload=w, world_size=world, global_batch=profile.global_batch_for(w)
        )
        for w in profile.workloads
    ]
    metafunc.parametrize("case", cases, ids=[c.id for c in cases])


def test_dp_phases(benchmark, case, profile, trials):
    benchmark.group = "dp-phases"
    info, result = measure_training(benchmark, case, session=trials, profile=profile, suite="dp_phases")
    step_times = [t for trial in result.trials for t in trial.unit_times]
    missing = DP_PHASES - set(info["phases"])
    assert not missing, f"dp reported no time for phases {sorted(missing)}"
    # The phases are parts of the step: together they cannot exceed the measured step time.
    assert sum(info["phases"].values()) <= sum(step_times) / len(step_times) * 1.05
    assert info["peak_memory_bytes"], "dp reported no peak memory"
