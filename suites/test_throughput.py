"""Suite 1 — throughput: every strategy × profile workload × world size (the largest only in the
quick profile), at one global batch (strong scaling: the same job split over more replicas);
`single` is the one-device baseline.
"""

from __future__ import annotations

from dpbench.measure import measure_training, strategy_cases
from dpbench.measure.plugin import session_of


def pytest_generate_tests(metafunc):
    if "case" not in metafunc.fixturenames:
        return
    profile = session_of(metafunc.config).profile
    cases = [
        case
        for workload in profile.workloads
        for case in strategy_cases(
            (workload,),
            profile.throughput_world_sizes,
            lambda size, w=workload: profile.global_batch_for(w),
            options=profile.strategy_options,
            configurations=profile.configurations,
        )
    ]
    metafunc.parametrize("case", cases, ids=[c.id for c in cases])


def test_throughput(benchmark, case, profile, trials, unavailable_to_skip):
    benchmark.group = f"throughput-{case.workload}"
    with unavailable_to_skip:
        info, _ = measure_training(benchmark, case, session=trials, profile=profile, suite="throughput")
    assert info["samples_per_s"] > 0
