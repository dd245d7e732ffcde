"""Suite 1 — throughput: every strategy × profile workload × world size, at one global batch
(strong scaling: the same job split over more replicas); `single` is the one-device baseline.
"""
from __future__ import annotations

import pytest

from dpbench.schema import StrategyName
from dpbench.suite import TrainingCase, measure_training

STRATEGIES = [s.value for s in StrategyName]


def pytest_generate_tests(metafunc):
    if "case" not in metafunc.fixturenames:
        return
    profile = metafunc.config._dpbench_profile
    cases = []
    for workload in profile.workloads:
        for strategy in STRATEGIES:
            sizes = (1,) if strategy == StrategyName.SINGLE.value else profile.world_sizes
            cases += [TrainingCase(strategy=strategy, workload=workload, world_size=size,
                                   global_batch=profile.global_batch) for size in sizes]
    metafunc.parametrize("case", cases, ids=[c.id for c in cases])


def test_throughput(benchmark, case, profile, timelines, unavailable_to_skip):
    benchmark.group = f"throughput-{case.workload}"
    with unavailable_to_skip:
        info, _ = measure_training(benchmark, case, profile=profile, suite="throughput",
                                   timeline_path=timelines.path_for)
    assert info["samples_per_s"] > 0
