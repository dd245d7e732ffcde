"""Suite 3 — DDP knobs: bucket size sweep, gradient_as_bucket_view, static_graph, comm hooks,
gradient accumulation with no_sync, all on one workload at the largest world size."""

from __future__ import annotations

from dpbench.measure import TrainingCase, measure_training
from dpbench.measure.plugin import session_of
from dpbench.schema import StrategyName

DDP = StrategyName.DDP.value


def _knob_options(profile) -> list[dict]:
    options: list[dict] = [{}]
    options += [{"bucket_cap_mb": cap} for cap in profile.bucket_cap_sweep]
    options += [
        {"gradient_as_bucket_view": True},
        {"static_graph": True},
        {"comm_hook": "fp16"},
        {"comm_hook": "bf16"},
        {"comm_hook": "powersgd"},
        {"accumulation_steps": 2},
    ]
    return options


def pytest_generate_tests(metafunc):
    if "case" not in metafunc.fixturenames:
        return
    profile = session_of(metafunc.config).profile
    world = max(profile.world_sizes)
    cases = [
        TrainingCase(
            strategy=DDP,
            workload=profile.knob_workload,
            world_size=world,
            global_batch=profile.global_batch_for(profile.knob_workload),
            options=opts,
        )
        for opts in _knob_options(profile)
    ]
    metafunc.parametrize("case", cases, ids=[c.id for c in cases])


def test_ddp_knob(benchmark, case, profile, trials, unavailable_to_skip):
    benchmark.group = f"ddp-knobs-{case.workload}"
    with unavailable_to_skip:
        info, _ = measure_training(benchmark, case, session=trials, profile=profile, suite="ddp_knobs")
    # extra_info records every resolved option (defaults too); the requested ones must be among them.
    assert info["options"].items() >= case.options.items()
