"""Step profiles read from a saved run (tests/predict/data/step_run.json: a real quick run, cut down)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpbench.errors import UsageError
from dpbench.predict import GradientGroup, StepProfile, profiles_from_run
from dpbench.predict.forecast import measure_overlap
from dpbench.predict.profile import profile_from_benchmark
from dpbench.results.load import read_run

RUN = Path(__file__).parent / "data" / "step_run.json"


def _case(run, strategy: str, world: int) -> dict:
    return next(
        b["extra_info"]
        for b in run.benchmarks
        if b["extra_info"].get("strategy") == strategy and b["extra_info"]["world_size"] == world
    )


def test_one_profile_per_strategy_from_one_rank():
    run = read_run(RUN)
    profiles = profiles_from_run(run, world_size=1)
    assert [(p.workload, p.label, p.world_size) for p in profiles] == [
        ("mlp", "allreduce", 1),
        ("mlp", "ddp", 1),
        ("mlp", "fsdp", 1),
        ("mlp", "zero", 1),
    ]
    ddp = profiles[1]
    info = _case(run, "ddp", 1)
    # at one rank the whole measured step is compute, split as the phases were
    assert ddp.compute_s == pytest.approx(info["step_time_s"])
    phases = info["phases"]
    assert ddp.backward_s / ddp.forward_s == pytest.approx(phases["backward"] / phases["forward"])
    assert ddp.param_bytes == info["parameter_count"] * 4
    assert ddp.threads_per_rank == info["threads_per_worker"] == 2
    # DDP's small first bucket, then the rest (under 25 MiB), in ready order
    assert [b.bytes for b in ddp.buckets] == [1 << 20, ddp.param_bytes - (1 << 20)]
    assert ddp.buckets[-1].ready_fraction == 1.0
    lo, hi = info["step_time_ci95"]
    assert ddp.spread == pytest.approx((lo / info["step_time_s"], hi / info["step_time_s"]))
    fsdp = profiles[2]
    assert len(fsdp.units) == _case(run, "fsdp", 1)["shard_units"]["count"]
    assert sum(u.bytes for u in fsdp.units) == fsdp.param_bytes


def test_at_two_ranks_the_compute_is_the_compute_only_step():
    run = read_run(RUN)
    ddp = next(p for p in profiles_from_run(run, world_size=2) if p.strategy == "ddp")
    assert ddp.compute_s == pytest.approx(_case(run, "ddp", 2)["compute_only_step_s"])


def test_a_case_without_phase_timings_names_the_suite_that_records_them():
    info = dict(_case(read_run(RUN), "ddp", 1), phases={})
    with pytest.raises(UsageError, match=r"ddp mlp w1: no phase timings \(extra_info.phases forward, backward, opti"):
        profile_from_benchmark(info, origin="r")


def test_two_ranks_without_the_compute_only_step_is_refused():
    info = dict(_case(read_run(RUN), "zero", 2), compute_only_step_s=None)
    with pytest.raises(UsageError, match=r"without its compute-only step \(extra_info.compute_only_step_s\)"):
        profile_from_benchmark(info, origin="r")


def test_a_run_without_training_cases_is_refused(tmp_path):
    doc = json.loads(RUN.read_text())
    doc["benchmarks"] = [b for b in doc["benchmarks"] if b["extra_info"]["kind"] == "collective"]
    path = tmp_path / "comm.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(UsageError, match="no ddp, fsdp, zero or allreduce training case"):
        profiles_from_run(read_run(path))


def test_the_overlap_slowdown_is_measured_from_the_multi_rank_ddp_case():
    overlap = measure_overlap(read_run(RUN))
    assert overlap is not None and overlap.origin.startswith("measured: the median over the run's 1 ddp case")
    assert 0.0 <= overlap.value <= 1.0


@pytest.mark.parametrize("slowdown", [0.0, 0.25, 0.6, 1.0])
def test_the_fitted_slowdown_gives_back_the_step_it_was_fitted_to(slowdown):
    from dpbench.predict.forecast import _fit_slowdown
    from dpbench.predict.schedule import replay
    from dpbench.predict.step import step_tasks

    profile = StepProfile(
        workload="w",
        strategy="ddp",
        label="ddp",
        world_size=2,
        per_rank_batch=8,
        forward_s=0.002,
        backward_s=0.010,
        optimizer_s=0.001,
        param_bytes=7_000_000,
        buckets=(
            GradientGroup(bytes=3_000_000, ready_fraction=0.5),
            GradientGroup(bytes=4_000_000, ready_fraction=1.0),
        ),
        step_time_s=0.02,
    )
    collectives = 0.007  # shared by bytes: 3 ms and 4 ms

    def send(collective, nbytes, group, spans):
        return collectives * nbytes / 7_000_000

    compute, comm, _ = step_tasks(profile, world_size=2, batch_scale=1.0, send=send, gpus_per_node=2)
    measured = replay(compute, comm, overlap_slowdown=slowdown).end_s
    assert _fit_slowdown(profile, collectives, measured) == pytest.approx(slowdown, abs=1e-6)
