"""Suite 2 — weak scaling: world size 1…N with a fixed per-replica batch.

scaling efficiency = throughput(N) / (N × throughput of `single` on one replica's batch),
computed trial by trial: trial i of a case against trial i of `single`, which ran in the same
interleaved pass, so a slow minute moves both. The headline is the median of those paired ratios
with a distribution-free interval (dpbench.stats.paired_ratio); a disturbed trial left out drops
its pair.
"""

from __future__ import annotations

import dataclasses
import statistics

from dpbench.measure import TrainingCase, measure_training, reference_result, strategy_cases
from dpbench.measure.plugin import session_of
from dpbench.schema import StrategyName
from dpbench.stats import paired_ratio


def pytest_generate_tests(metafunc):
    if "case" not in metafunc.fixturenames:
        return
    profile = session_of(metafunc.config).profile
    cases = []
    for workload in profile.scaling_workloads:
        per_replica = profile.per_replica_batch_for(workload)
        for case in strategy_cases(
            (workload,),
            profile.world_sizes,
            lambda size, b=per_replica: b * size,
            options=profile.strategy_options,
            configurations=profile.configurations,
        ):
            single = TrainingCase(
                strategy=StrategyName.SINGLE.value,
                workload=workload,
                world_size=1,
                global_batch=per_replica,
                options=dict(profile.strategy_options.get(StrategyName.SINGLE.value, {})),
            )
            cases.append(dataclasses.replace(case, reference=single))
    metafunc.parametrize("case", cases, ids=[c.id for c in cases])


def test_scaling(benchmark, case, profile, trials, unavailable_to_skip):
    benchmark.group = f"scaling-{case.workload}"
    with unavailable_to_skip:
        info, result = measure_training(benchmark, case, session=trials, profile=profile, suite="scaling")
    single = reference_result(trials, case)
    assert single is not None, f"the single-device reference {case.reference.id} did not run in this session"
    # efficiency_i = (batch / t_i) / (N × batch_single / t_single_i), trial i against trial i
    scale = case.reference.global_batch * case.world_size / case.global_batch
    efficiency = paired_ratio(single.values, result.values).scaled(1 / scale)
    benchmark.extra_info.update(
        {
            "baseline_samples_per_s": case.reference.global_batch / statistics.median(single.kept),
            "scaling_efficiency": efficiency.ratio,
            "scaling_efficiency_ci95": efficiency.interval,
            "scaling_efficiency_trials": list(efficiency.ratios),
        }
    )
    assert benchmark.extra_info["scaling_efficiency"] > 0
