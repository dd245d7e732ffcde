"""Step profiles read from a saved run (tests/predict/data/step_run.json: a real quick run, cut down)."""

from __future__ import annotations

import dataclasses
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


def _two_bucket_ddp(**changes) -> StepProfile:
    """A ddp step at 2 ranks: 2 + 10 + 1 ms of compute, two buckets (3 MB ready at half the backward, 4 MB)."""
    base = StepProfile(
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
    return dataclasses.replace(base, **changes)


@pytest.mark.parametrize("slowdown", [0.0, 0.25, 0.6, 1.0])
def test_the_fitted_slowdown_gives_back_the_step_it_was_fitted_to(slowdown):
    from dpbench.predict.forecast import _fit_slowdown
    from dpbench.predict.schedule import replay
    from dpbench.predict.step import step_tasks

    profile = _two_bucket_ddp()
    collectives = 0.007  # shared by bytes: 3 ms and 4 ms

    def send(collective, nbytes, group, spans):
        return collectives * nbytes / 7_000_000

    compute, comm, _ = step_tasks(profile, world_size=2, batch_scale=1.0, send=send, gpus_per_node=2)
    measured = replay(compute, comm, overlap_slowdown=slowdown).end_s
    assert _fit_slowdown(profile, collectives, measured) == pytest.approx(slowdown, abs=1e-6)


def test_the_profile_reads_the_buffer_bytes_and_the_micro_batches():
    info = _case(read_run(RUN), "ddp", 1)
    assert "buffer_bytes" not in info  # recorded since this run was saved
    old = profile_from_benchmark(info, origin="r")
    assert old.buffer_bytes is None and old.accumulation_steps == 1 and old.broadcasts_buffers
    options = dict(info["options"], accumulation_steps=2, broadcast_buffers=False)
    new = profile_from_benchmark(dict(info, buffer_bytes=4096, options=options), origin="r")
    assert (new.buffer_bytes, new.accumulation_steps, new.broadcasts_buffers) == (4096, 2, False)
    # only ddp accumulates; zero broadcasts its buffers as DDP's default does
    zero = profile_from_benchmark(_case(read_run(RUN), "zero", 1), origin="r")
    assert zero.accumulation_steps == 1 and zero.broadcasts_buffers


def _with_buffer_bytes(tmp_path, nbytes: int) -> Path:
    doc = json.loads(RUN.read_text())
    for bench in doc["benchmarks"]:
        if bench["extra_info"]["kind"] == "training":
            bench["extra_info"]["buffer_bytes"] = nbytes
    path = tmp_path / "with-buffers.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_run_without_buffer_bytes_says_the_broadcasts_are_not_modelled(tmp_path):
    from test_schedule import MODEL

    from dpbench.predict import step_predictions
    from dpbench.predict.step import OverlapSlowdown

    overlap = OverlapSlowdown(value=0.0, origin="test")
    old = step_predictions(read_run(RUN), MODEL, [2], overlap=overlap)
    assert (
        "buffer broadcasts not modelled for ddp, zero: the run does not record the buffers' bytes "
        "(extra_info.buffer_bytes)"
    ) in old.notes
    new = step_predictions(read_run(_with_buffer_bytes(tmp_path, 1_000_000)), MODEL, [2], overlap=overlap)
    assert not any("buffer broadcasts" in n for n in new.notes)
    steps = {p.label: p.step_time_s for p in old.predictions}
    # 1 MB at 1 GB/s before the first forward: ddp and zero take 1 ms longer, the others nothing
    assert {p.label: p.step_time_s - steps[p.label] for p in new.predictions} == pytest.approx(
        {"allreduce": 0.0, "ddp": 1e-3, "fsdp": 0.0, "zero": 1e-3}
    )
    # a run whose models have no buffers: nothing to broadcast, nothing to note
    none = step_predictions(read_run(_with_buffer_bytes(tmp_path, 0)), MODEL, [2], overlap=overlap)
    assert [p.step_time_s for p in none.predictions] == [p.step_time_s for p in old.predictions]
    assert not any("buffer broadcasts" in n for n in none.notes)


@pytest.mark.parametrize("slowdown", [0.0, 0.6, 1.0])
def test_the_fitted_slowdown_shares_the_collectives_with_the_buffer_broadcast(slowdown):
    from dpbench.predict.forecast import _fit_slowdown
    from dpbench.predict.schedule import replay
    from dpbench.predict.step import step_tasks

    profile = _two_bucket_ddp(options={"accumulation_steps": 2}, buffer_bytes=1_000_000)
    collectives = 0.008  # shared by bytes: the 1 ms broadcast, 3 ms and 4 ms of all-reduce

    def send(collective, nbytes, group, spans):
        return collectives * nbytes / 8_000_000

    compute, comm, _ = step_tasks(profile, world_size=2, batch_scale=1.0, send=send, gpus_per_node=2)
    assert sum(t.seconds for t in comm) == pytest.approx(collectives)
    measured = replay(compute, comm, overlap_slowdown=slowdown).end_s
    assert _fit_slowdown(profile, collectives, measured) == pytest.approx(slowdown, abs=1e-6)
