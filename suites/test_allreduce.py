"""Suite 4 — hand-written allreduce (per-param, bucketed, overlap) against DDP on the same
workload, world size and batches. ``relative_to_ddp`` = allreduce step time / DDP step time, trial by
trial (median, 95% interval)."""

from __future__ import annotations

from dpbench.measure import TrainingCase, measure_training, reference_result, relative_to
from dpbench.measure.plugin import session_of
from dpbench.schema import StrategyName

MODES = ("per-param", "bucketed", "overlap")


def pytest_generate_tests(metafunc):
    if "case" not in metafunc.fixturenames:
        return
    profile = session_of(metafunc.config).profile
    world = max(profile.world_sizes)
    workload = profile.knob_workload
    ddp = TrainingCase(
        strategy=StrategyName.DDP.value,
        workload=workload,
        world_size=world,
        global_batch=profile.global_batch_for(profile.knob_workload),
    )
    cases = [ddp] + [
        TrainingCase(
            strategy=StrategyName.ALLREDUCE.value,
            workload=workload,
            world_size=world,
            global_batch=profile.global_batch_for(profile.knob_workload),
            options={"mode": mode},
            reference=ddp,
        )
        for mode in MODES
    ]
    metafunc.parametrize("case", cases, ids=[c.id for c in cases])


def test_allreduce_vs_ddp(benchmark, case, profile, trials, unavailable_to_skip):
    benchmark.group = f"allreduce-vs-ddp-{case.workload}"
    with unavailable_to_skip:
        info, result = measure_training(benchmark, case, session=trials, profile=profile, suite="allreduce")
    ddp = reference_result(trials, case)
    if ddp is not None:
        # Trial i against DDP's trial i: both ran in the same interleaved pass.
        benchmark.extra_info.update(relative_to("relative_to_ddp", result, ddp))
    assert info["step_time_s"] > 0
