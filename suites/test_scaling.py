"""Suite 2 — weak scaling: world size 1…N with a fixed per-replica batch.

scaling efficiency = throughput(N) / (N × throughput of `single` on one replica's batch),
with the `single` baseline measured in this same session.
"""
from __future__ import annotations

from dpbench.schema import StrategyName
from dpbench.suite import TrainingCase, measure_training, strategy_cases


def pytest_generate_tests(metafunc):
    if "case" not in metafunc.fixturenames:
        return
    profile = metafunc.config._dpbench_profile
    # `single` comes first, so its baseline exists before the parallel cases need it.
    cases = strategy_cases(profile.scaling_workloads, profile.world_sizes,
                           lambda size: profile.per_replica_batch * size)
    metafunc.parametrize("case", cases, ids=[c.id for c in cases])


def _single_baseline(case: TrainingCase, profile) -> float:
    """Measure `single` untimed-by-pytest when its own case was deselected (-k)."""
    import dpbench

    with dpbench.launch(StrategyName.SINGLE.value, case.workload, world_size=1,
                        global_batch=profile.per_replica_batch, device=profile.device) as run:
        run.step(2)
        return run.step(profile.max_steps_per_round).samples_per_s


def test_scaling(benchmark, case, profile, timelines, baselines, unavailable_to_skip):
    benchmark.group = f"scaling-{case.workload}"
    with unavailable_to_skip:
        info, _ = measure_training(benchmark, case, profile=profile, suite="scaling",
                                   timeline_path=timelines.path_for)
    key = (case.workload, profile.per_replica_batch)
    if case.strategy == StrategyName.SINGLE.value:
        baselines[key] = info["samples_per_s"]
    if key not in baselines:
        baselines[key] = _single_baseline(case, profile)
    efficiency = info["samples_per_s"] / (case.world_size * baselines[key])
    benchmark.extra_info["baseline_samples_per_s"] = baselines[key]
    benchmark.extra_info["scaling_efficiency"] = efficiency
    assert efficiency > 0
