"""The step schedules' arithmetic on hand-computed cases: a linear collective model (no latency,
1 GB/s of bus bandwidth), so a collective of b bytes among 2 ranks takes a known time."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from dpbench.errors import UsageError
from dpbench.predict import CollectiveModel, GradientGroup, StepProfile, TierFit, predict_step
from dpbench.predict.schedule import COMM, COMPUTE, Task, replay
from dpbench.predict.step import OverlapSlowdown, needed_collectives, step_tasks

MS = 1e-3


def _fit(collective: str) -> TierFit:
    return TierFit(
        collective=collective,
        tier="intra",
        base_us=0.0,
        step_us=0.0,
        busbw_gbps=1.0,  # b bytes × bus factor / 1 GB/s; at 2 ranks all_reduce's factor is 1, all_gather's 1/2
        base_interval=None,
        step_interval=None,
        busbw_interval=None,
        residual_sd=0.0,
        points=0,
        world_sizes=(),
        origin="hand-made",
    )


MODEL = CollectiveModel(
    tiers=tuple(_fit(c) for c in ("all_reduce", "all_gather", "reduce_scatter", "broadcast")),
    gpus_per_node=8,
    gpus_per_node_origin="test",
)


def _profile(strategy: str, **changes) -> StepProfile:
    fields = dict(
        workload="w",
        strategy=strategy,
        label=strategy,
        world_size=1,
        per_rank_batch=32,
        forward_s=2 * MS,
        backward_s=10 * MS,
        optimizer_s=1 * MS,
        param_bytes=7_000_000,
        # 3 ms and 4 ms of all-reduce at 2 ranks, ready half-way through backward and at its end
        buckets=(
            GradientGroup(bytes=3_000_000, ready_fraction=0.5),
            GradientGroup(bytes=4_000_000, ready_fraction=1.0),
        ),
        step_time_s=13 * MS,
    )
    fields.update(changes)
    return StepProfile(**fields)


def _step(profile: StepProfile, slowdown: float, world: int = 2, scaling: str = "weak"):
    return predict_step(profile, MODEL, world, overlap=OverlapSlowdown(value=slowdown, origin="test"), scaling=scaling)


@pytest.mark.parametrize(
    ("slowdown", "step_ms"),
    [
        # bucket 0 runs 7–10 ms under backward; bucket 1 waits for backward's end (12) and runs to 16;
        # the optimizer 16–17: exposed = the 4 ms that overrun backward
        (0.0, 17.0),
        # compute at half speed while bucket 0 runs: backward ends at 13.5, bucket 1 to 17.5, optimizer to 18.5
        (0.5, 18.5),
        # compute stops while a collective runs: serial, 13 + 3 + 4
        (1.0, 20.0),
    ],
)
def test_ddp_all_reduces_buckets_in_ready_order_overlapping_the_rest_of_backward(slowdown, step_ms):
    p = _step(_profile("ddp"), slowdown)
    assert p.step_time_s == pytest.approx(step_ms * MS)
    assert p.compute_s == pytest.approx(13 * MS)
    assert p.exposed_comm_s == pytest.approx((step_ms - 13) * MS)
    assert p.comm_s == pytest.approx(7 * MS)


def test_one_rank_sends_nothing_and_gives_the_measured_step():
    p = _step(_profile("ddp"), 1.0, world=1)
    assert p.step_time_s == pytest.approx(13 * MS) and p.exposed_comm_s == 0.0
    assert p.scaling_efficiency == pytest.approx(1.0)


def test_weak_scaling_efficiency_is_one_rank_step_over_the_step():
    p = _step(_profile("ddp"), 0.0)
    assert p.scaling_efficiency == pytest.approx(13 / 17)
    assert (p.per_rank_batch, p.global_batch) == (32, 64)
    assert p.samples_per_s == pytest.approx(64 / (17 * MS))


def test_zero_steps_its_partition_then_broadcasts_every_partition():
    # ddp's part with the optimizer halved: bucket 1 ends at 16, optimizer 16–16.5,
    # then 2 broadcasts of 3.5 MB (broadcast's factor is 1): 3.5 ms each → 23.5
    p = _step(_profile("zero"), 0.0)
    assert p.step_time_s == pytest.approx(23.5 * MS)
    assert p.compute_s == pytest.approx(12.5 * MS)


def test_allreduce_bucketed_sends_after_backward():
    # forward and backward 0–12, buckets 12–15 and 15–19, optimizer 19–20: nothing overlaps
    assert _step(_profile("allreduce"), 0.0).step_time_s == pytest.approx(20 * MS)
    # its overlap mode is ddp's schedule
    overlapped = _profile("allreduce", options={"mode": "overlap"})
    assert _step(overlapped, 0.0).step_time_s == pytest.approx(17 * MS)


def test_fsdp_prefetches_one_unit_ahead_and_gathers_again_in_backward():
    units = (GradientGroup(bytes=2_000_000, ready_fraction=0.5), GradientGroup(bytes=2_000_000, ready_fraction=1.0))
    profile = _profile("fsdp", buckets=(), units=units, forward_s=2 * MS, backward_s=4 * MS, param_bytes=4_000_000)
    # all_gather and reduce_scatter of 2 MB at 2 ranks: 1 ms each. AG0 0–1, forward 0 1–2 (AG1 1–2),
    # forward 1 2–3, AG1 again 3–4, backward 1 4–6 (AG0 again 4–5), RS1 6–7, backward 0 6–8, RS0 8–9,
    # the optimizer on the shard 9–9.5
    p = _step(profile, 0.0)
    assert p.step_time_s == pytest.approx(9.5 * MS)
    assert p.compute_s == pytest.approx(6.5 * MS)
    # kept after forward: no gathers in backward; backward 3–7 (RS1 5–6, RS0 7–8), optimizer 8–8.5
    kept = _profile(
        "fsdp",
        buckets=(),
        units=units,
        forward_s=2 * MS,
        backward_s=4 * MS,
        param_bytes=4_000_000,
        options={"reshard_after_forward": False},
    )
    assert _step(kept, 0.0).step_time_s == pytest.approx(8.5 * MS)


def test_hsdp_needs_a_replicate_that_divides_the_world_size():
    units = (GradientGroup(bytes=2_000_000, ready_fraction=1.0),)
    profile = _profile("fsdp", buckets=(), units=units, options={"replicate": 2})
    with pytest.raises(UsageError, match=r"--world-sizes: 3: fsdp option replicate=2 \(HSDP\) must divide"):
        _step(profile, 0.0, world=3)
    # at 4 ranks: shard groups of 2, and an all-reduce of the 1 MB shard across the 2 replicas
    assert _step(profile, 0.0, world=4).comm_s == pytest.approx((1 + 1 + 1 + 1) * MS)


def test_strong_scaling_splits_the_measured_global_batch():
    p = _step(_profile("ddp"), 0.0, scaling="strong")
    assert (p.per_rank_batch, p.global_batch) == (16, 32)
    # forward 0–1, backward 1–6 (bucket 0 ready at 3.5: 3.5–6.5; bucket 1 ready at 6, waits: 6.5–10.5),
    # optimizer 10.5–11.5
    assert p.step_time_s == pytest.approx(11.5 * MS)
    # one rank taking all 32 samples takes the measured 13 ms
    assert p.scaling_efficiency == pytest.approx(13 / (2 * 11.5))


def test_a_schedule_that_waits_on_itself_is_refused():
    compute = [Task(name="a", seconds=1.0, after_end=((COMM, 0),))]
    comm = [Task(name="b", seconds=1.0, after_end=((COMPUTE, 0),))]
    with pytest.raises(ValueError, match="schedule waits on itself: a, b can never start"):
        replay(compute, comm, overlap_slowdown=0.0)


def test_fewer_threads_per_rank_slow_every_compute_phase():
    profile = _profile("ddp", threads_per_rank=2)
    # compute doubles: forward 0–4, backward 4–24 (bucket 0 ready at 14: 14–17; bucket 1 at 24: 24–28),
    # optimizer 28–30
    p = predict_step(profile, MODEL, 2, overlap=OverlapSlowdown(value=0.0, origin="test"), threads_per_rank=1)
    assert p.step_time_s == pytest.approx(30 * MS)
    assert p.compute_s == pytest.approx(26 * MS)
    # the one-rank reference keeps its own 2 threads: 13 ms
    assert p.scaling_efficiency == pytest.approx(13 / 30)
    # a profile that does not record its threads is left as measured
    unrecorded = predict_step(
        _profile("ddp"), MODEL, 2, overlap=OverlapSlowdown(value=0.0, origin="test"), threads_per_rank=1
    )
    assert unrecorded.step_time_s == pytest.approx(17 * MS)


@pytest.mark.parametrize(
    ("slowdown", "step_ms"),
    [
        # micro-batch 0: forward 0–1, backward 1–6 (no_sync: nothing sent); micro-batch 1: forward 6–7,
        # backward to bucket 0 7–9.5 (bucket 0 9.5–12.5), the rest 9.5–12; bucket 1 waits: 12.5–16.5;
        # the optimizer once, 16.5–17.5
        (0.0, 17.5),
        # compute stops while bucket 0 runs: the rest of backward 12.5–15, bucket 1 15–19, optimizer 19–20
        (1.0, 20.0),
    ],
)
def test_ddp_accumulation_all_reduces_in_the_last_micro_batch_only(slowdown, step_ms):
    profile = _profile("ddp", options={"accumulation_steps": 2})
    p = _step(profile, slowdown)
    assert p.step_time_s == pytest.approx(step_ms * MS)
    assert p.compute_s == pytest.approx(13 * MS) and p.comm_s == pytest.approx(7 * MS)
    compute, comm, _ = step_tasks(profile, world_size=2, batch_scale=1.0, send=_linear_send, gpus_per_node=8)
    assert [t.name for t in compute] == [
        "forward micro-batch 0",
        "backward micro-batch 0",
        "forward micro-batch 1",
        "backward to bucket 0",
        "backward to bucket 1",
        "optimizer",
    ]
    done = replay(compute, comm, overlap_slowdown=slowdown)
    # the first all-reduce starts when the second micro-batch's backward has made bucket 0 ready
    assert done.comm[0][0] == pytest.approx(done.compute[3][1]) == pytest.approx(9.5 * MS)


def _linear_send(collective: str, nbytes: float, group: int, spans: bool) -> float:
    return nbytes / 1e9 if group > 1 else 0.0  # MODEL's 1 GB/s at 2 ranks (every factor 1 there but all_gather's)


def test_strong_scaling_keeps_the_micro_batches_and_refuses_a_rank_with_fewer_samples():
    profile = _profile("ddp", options={"accumulation_steps": 8})  # 32 samples at one rank
    assert _step(profile, 0.0, world=4, scaling="strong").per_rank_batch == 8
    with pytest.raises(
        UsageError,
        match=r"^--world-sizes: 8: ddp option accumulation_steps=8 expects at least 8 samples per rank, found 4 ",
    ):
        _step(profile, 0.0, world=8, scaling="strong")
    # weak scaling keeps the measured 32 per rank
    assert _step(profile, 0.0, world=8).per_rank_batch == 32


@pytest.mark.parametrize(
    ("strategy", "options", "world", "step_ms"),
    [
        # the 1 MB broadcast 0–1 (broadcast's factor is 1), then ddp's 17 ms shifted by it
        ("ddp", {}, 2, 18.0),
        ("ddp", {"accumulation_steps": 2}, 2, 18.5),
        ("zero", {}, 2, 24.5),
        # nothing to send at one rank, nor with the option off
        ("ddp", {}, 1, 13.0),
        ("ddp", {"broadcast_buffers": False}, 2, 17.0),
    ],
)
def test_the_buffer_broadcast_comes_before_the_first_forward(strategy, options, world, step_ms):
    profile = _profile(strategy, options=options, buffer_bytes=1_000_000)
    p = _step(profile, 0.0, world=world)
    assert p.step_time_s == pytest.approx(step_ms * MS)
    if step_ms not in (13.0, 17.0):
        compute, comm, _ = step_tasks(profile, world_size=world, batch_scale=1.0, send=_linear_send, gpus_per_node=8)
        assert comm[0].name == "broadcast buffers" and compute[0].after_end == ((COMM, 0),)
        assert replay(compute, comm, overlap_slowdown=0.0).compute[0][0] == pytest.approx(1 * MS)


def test_ddp_needs_broadcast_only_where_it_sends_buffers():
    assert needed_collectives(_profile("ddp", buffer_bytes=1_000_000)) == ("all_reduce", "broadcast")
    assert needed_collectives(_profile("ddp", buffer_bytes=0)) == ("all_reduce",)
    assert needed_collectives(_profile("ddp")) == ("all_reduce",)  # not recorded
    off = _profile("ddp", buffer_bytes=1_000_000, options={"broadcast_buffers": False})
    assert needed_collectives(off) == ("all_reduce",)


def _nccl_model(*tiers: TierFit, backends: tuple[str, ...] = ("nccl",)) -> CollectiveModel:
    return CollectiveModel(tiers=tiers, gpus_per_node=8, gpus_per_node_origin="test", backends=backends)


def test_on_nccl_all_gather_and_reduce_scatter_take_broadcasts_bandwidth_not_an_nvls_all_reduces():
    from dpbench.predict.collectives import fit_collectives
    from dpbench.predict.measurements import read_nccl_tests
    from dpbench.predict.step import with_derived_collectives

    # an NVLS all-reduce's bus bandwidth (480 GB/s) above the ring's a broadcast reaches (360 GB/s)
    nvls = dataclasses.replace(_fit("all_reduce"), base_us=20.0, busbw_gbps=480.0)
    ring = dataclasses.replace(_fit("broadcast"), busbw_gbps=360.0)
    derived = with_derived_collectives(_nccl_model(nvls, ring))
    for name in ("all_gather", "reduce_scatter"):
        (fit,) = (t for t in derived.tiers if t.collective == name)
        assert (fit.base_us, fit.busbw_gbps) == (20.0, 360.0)
    assert derived.notes == (
        "all_gather and reduce_scatter not measured: taken from the all_reduce fit (a ring all-reduce is both); "
        "on NCCL at broadcast's bus bandwidth, lower (intra tier): NCCL's all_reduce may run NVLS on NVSwitch "
        "nodes, faster than all_gather and reduce_scatter can be",
    )
    # without a broadcast to bound it, the assumption is stated
    (note,) = with_derived_collectives(_nccl_model(nvls)).notes
    assert note.endswith(
        "; assumed as fast as NCCL's all_reduce (intra tier): on NVSwitch nodes it may run NVLS, which they cannot, "
        "and they are predicted too fast — measure them (nccl-tests' all_gather_perf, reduce_scatter_perf in "
        "--collectives)"
    )
    # gloo runs no NVLS: all_reduce's bandwidth as before
    gloo = with_derived_collectives(_nccl_model(nvls, ring, backends=("gloo",)))
    assert {t.busbw_gbps for t in gloo.tiers if t.collective == "all_gather"} == {480.0}
    # nccl-tests logs are NCCL's
    log = Path(__file__).parent / "data" / "nccl_2.log"
    assert fit_collectives(read_nccl_tests(log, collective="all_reduce")).backends == ("nccl",)


def test_strong_scaling_with_the_micro_batch_fixed_runs_fewer_micro_batches_per_rank():
    profile = _profile("ddp", options={"accumulation_steps": 8})  # 32 samples at one rank: micro-batches of 4
    overlap = OverlapSlowdown(value=0.0, origin="test")

    def step(world: int, accumulation: str):
        return predict_step(profile, MODEL, world, overlap=overlap, scaling="strong", accumulation=accumulation)

    fixed, count = step(2, "micro-batch"), step(2, "count")
    assert (fixed.micro_batches, count.micro_batches) == (4, 8)
    # 16 per rank: forward 1 ms, backward 5 ms in all. Four micro-batches: 4.75 ms until the last backward,
    # half of it (0.625 ms) to bucket 0 (3 ms, to 8.375), bucket 1 after it (4 ms), the optimizer: 13.375 ms;
    # eight: 5.375 ms, then 0.3125 ms to bucket 0 (to 8.6875), bucket 1 (4 ms), the optimizer: 13.6875 ms
    assert fixed.step_time_s == pytest.approx(13.375 * MS)
    assert count.step_time_s == pytest.approx(13.6875 * MS)
    assert step(1, "micro-batch").micro_batches == 8
    # 8 ranks: 4 per rank, one micro-batch of 4 (count refuses: fewer samples than micro-batches)
    assert step(8, "micro-batch").micro_batches == 1
    with pytest.raises(UsageError, match="--accumulation micro-batch keeps the micro-batch instead$"):
        step(8, "count")
    with pytest.raises(
        UsageError,
        match=r"^--world-sizes: 16: the measured global batch of 32 cannot split into micro-batches of 4 on every "
        r"one of 16 ranks \(--accumulation micro-batch\): expected a world size that divides 8$",
    ):
        step(16, "micro-batch")
