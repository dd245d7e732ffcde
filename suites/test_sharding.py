"""Suite 7 — sharded data parallel against DDP: ``ddp``, ``zero`` (ZeRO-1) and ``fsdp`` (FSDP2, with
and without ``reshard_after_forward``) on the transformer and the MLP, trained with AdamW so the
optimizer state ZeRO and FSDP shard exists, at the throughput suite's world sizes (every world
size in ``full``; the largest in ``quick``, where sharding at one rank shards nothing).

Each case reports throughput, memory per rank (parameters, gradients and optimizer state each
rank holds, plus the peak), MFU and exposed communication (``Run.case_metrics()`` merged with
``dpbench.measure.derive.derive`` into ``extra_info``), and ``relative_to_ddp``: step time ÷ DDP's step
time at the same world size, trial by trial.
"""

from __future__ import annotations

from dpbench.measure import TrainingCase, measure_training, reference_result, relative_to
from dpbench.measure.plugin import session_of
from dpbench.schema import StrategyName

WORKLOADS = ("transformer", "mlp")
SHARDED = (
    (StrategyName.ZERO.value, {}),
    (StrategyName.FSDP.value, {"reshard_after_forward": True}),
    (StrategyName.FSDP.value, {"reshard_after_forward": False}),
)


def sharding_cases(profile) -> list[TrainingCase]:
    # The workloads named for the run; else the two this suite is about, or the profile's when
    # DPBENCH_WORKLOADS names others.
    workloads = [w for w in WORKLOADS if w in profile.workloads] or list(profile.workloads)
    if profile.workloads_chosen:
        workloads = list(profile.workloads)
    cases = []
    for workload in workloads:
        for world in profile.throughput_world_sizes:
            ddp = TrainingCase(
                strategy=StrategyName.DDP.value,
                workload=workload,
                world_size=world,
                global_batch=profile.global_batch_for(workload),
                options={"optimizer": "adamw"},
            )
            cases.append(ddp)
            cases += [
                TrainingCase(
                    strategy=strategy,
                    workload=workload,
                    world_size=world,
                    global_batch=profile.global_batch_for(workload),
                    options={"optimizer": "adamw", **options},
                    reference=ddp,
                )
                for strategy, options in SHARDED
            ]
    return cases


def pytest_generate_tests(metafunc):
    if "case" not in metafunc.fixturenames:
        return
    cases = sharding_cases(session_of(metafunc.config).profile)
    metafunc.parametrize("case", cases, ids=[c.id for c in cases])


def test_sharding(benchmark, case, profile, trials, unavailable_to_skip):
    benchmark.group = f"sharding-{case.workload}-w{case.world_size}"
    with unavailable_to_skip:
        info, result = measure_training(benchmark, case, session=trials, profile=profile, suite="sharding")
    ddp = reference_result(trials, case)
    if ddp is not None:
        # Trial i against DDP's trial i: both ran in the same interleaved pass.
        benchmark.extra_info.update(relative_to("relative_to_ddp", result, ddp))
    assert info["samples_per_s"] > 0
    memory = info.get("memory_per_rank")
    if memory is not None:  # measured once per case, in its first trial
        assert len(memory) == case.world_size
        assert all(m["optimizer_state_bytes"] > 0 for m in memory), "AdamW keeps state on every rank"
