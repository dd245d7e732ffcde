"""The compute floor (dpbench/predict/compute.py) and ranks sharing a GPU, on fabricated GPU runs:
ddp on one workload whose forward + backward is exactly 1.5 ms + 10 µs per sample, measured at one rank
(64 per rank) and at two (32 per rank: strong scaling), on two GPUs or on one."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from test_schedule import MODEL

from dpbench.predict import step_predictions
from dpbench.predict.compute import ComputeFloor, fit_floor
from dpbench.predict.profile import profiles_from_run
from dpbench.predict.step import OverlapSlowdown
from dpbench.predict.text import format_steps, prediction_cells, steps_document

MS = 1e-3
FLOOR, PER_SAMPLE, OPTIMIZER = 1.5 * MS, 0.01 * MS, 0.2 * MS
DDP_OPTIONS = {"bucket_cap_mb": None, "accumulation_steps": 1, "broadcast_buffers": True, "optimizer": "sgd"}
OVERLAP = OverlapSlowdown(value=0.0, origin="test")


def _case(world: int, per_rank: int, *, devices: dict[str, list[int]], step_s: float) -> dict:
    """A ddp training case on a GPU whose forward + backward is FLOOR + PER_SAMPLE × per_rank."""
    fb = FLOOR + PER_SAMPLE * per_rank
    info = {
        "kind": "training",
        "suite": "throughput",
        "strategy": "ddp",
        "options": DDP_OPTIONS,
        "requested_options": {},
        "workload": "w",
        "workload_spec": "w",
        "world_size": world,
        "global_batch": per_rank * world,
        "per_replica_batch": [per_rank] * world,
        "device_type": "cuda",
        "threads_per_worker": 4,
        "phases": {"forward": fb / 3, "backward": 2 * fb / 3, "optimizer": OPTIMIZER},
        "step_time_s": step_s if world > 1 else fb + OPTIMIZER,
        "parameter_count": 1_000_000,
        "buffer_bytes": 0,
        "sampler": {"rank_devices": devices},
    }
    if world > 1:
        info["compute_only_step_s"] = fb + OPTIMIZER
        info["collective_time_s"] = 1 * MS
    return info


def _run(*infos: dict) -> SimpleNamespace:
    return SimpleNamespace(run_id="fake", path="fake.json", benchmarks=[{"extra_info": i} for i in infos])


ONE_RANK = _case(1, 64, devices={"cuda:0": [0]}, step_s=0.0)
TWO_GPUS = _case(2, 32, devices={"cuda:0": [0], "cuda:1": [1]}, step_s=2 * MS)
ONE_GPU = _case(2, 32, devices={"cuda:0": [0, 1]}, step_s=4 * MS)


def test_two_points_give_the_floor_and_the_per_sample_cost_exactly():
    fitted = fit_floor([(64, FLOOR + 64 * PER_SAMPLE), (32, FLOOR + 32 * PER_SAMPLE)], origin="two cases")
    assert fitted is not None and fitted.measured and fitted.batches == (32, 64)
    assert (fitted.floor_s, fitted.per_sample_s) == pytest.approx((FLOOR, PER_SAMPLE), rel=1e-12)
    # 16 per rank: (1.5 + 0.16) / (1.5 + 0.64) of the compute at 64, not a quarter of it
    assert fitted.scale(64, 16) == pytest.approx(1.66 / 2.14, rel=1e-12)
    assert fit_floor([(64, 1.0), (64, 1.1)], origin="one batch") is None
    # neither part below zero: a step that shrank as its batch grew is flat
    flat = fit_floor([(32, 3 * MS), (64, 2 * MS)], origin="noise")
    assert flat is not None and flat.per_sample_s == 0.0 and flat.scale(64, 16) == 1.0


def test_a_floor_is_measured_from_the_configuration_at_two_per_rank_batches():
    (profile,) = profiles_from_run(_run(ONE_RANK, TWO_GPUS), world_size=1)
    floor = profile.compute_floor
    assert floor is not None and floor.measured and floor.batches == (32, 64)
    assert (floor.floor_s, floor.per_sample_s) == pytest.approx((FLOOR, PER_SAMPLE), rel=1e-9)
    assert floor.origin == "the run's ddp on w at w1 (64 per rank), w2 (32 per rank)"
    forecast = step_predictions(
        _run(ONE_RANK, TWO_GPUS), MODEL, [2, 4], scaling="strong", overlap=OVERLAP, from_world_size=1
    )
    at2, at4 = forecast.predictions
    # strong scaling, 16 per rank at 4 ranks: 1.5 ms + 0.16 ms of forward + backward, the optimizer whole
    assert at4.compute_s == pytest.approx(FLOOR + 16 * PER_SAMPLE + OPTIMIZER, rel=1e-9)
    assert at4.compute_floor == floor
    # the run's own case at 2 ranks and the same global batch stands beside the prediction, with its error
    assert at2.measured_step_time_s == 2 * MS and at2.error == pytest.approx(at2.step_time_s / (2 * MS) - 1)
    text = format_steps(forecast)
    assert (
        "compute of ddp on w: forward + backward 1.5 ms + 10 µs per sample, fitted on per-rank batches 32, 64 "
        "(the run's ddp on w at w1 (64 per rank), w2 (32 per rank))"
    ) in text
    record = steps_document(forecast)["predictions"][1]
    assert record["compute_floor"]["floor_s"] == pytest.approx(FLOOR, rel=1e-9)


def test_without_a_second_per_rank_batch_the_compute_is_linear_and_said_so():
    forecast = step_predictions(_run(ONE_RANK), MODEL, [4], scaling="strong", overlap=OVERLAP)
    (at4,) = forecast.predictions
    assert at4.compute_floor == ComputeFloor(
        floor_s=0.0, per_sample_s=None, origin="the run measured ddp on w at one per-rank batch (64)"
    )
    assert at4.compute_s == pytest.approx((FLOOR + 64 * PER_SAMPLE) / 4 + OPTIMIZER, rel=1e-9)
    assert (
        "compute of ddp on w scaled linearly with the per-rank batch: no floor measured "
        "(the run measured ddp on w at one per-rank batch (64))"
    ) in format_steps(forecast)
    # weak scaling keeps the per-rank batch: nothing is scaled, nothing to state
    weak = step_predictions(_run(ONE_RANK), MODEL, [4], overlap=OVERLAP)
    assert "compute of ddp" not in format_steps(weak)


def test_ranks_sharing_one_gpu_are_flagged_and_no_check_of_the_model():
    forecast = step_predictions(
        _run(ONE_RANK, ONE_GPU), MODEL, [2], scaling="strong", overlap=OVERLAP, from_world_size=1
    )
    (at2,) = forecast.predictions
    # two ranks time-slicing one GPU measured no compute at 32 per rank on a GPU of its own: no floor from it
    assert at2.compute_floor.per_sample_s is None
    assert at2.compute_floor.origin == (
        "ddp on w's other per-rank batches ran on other resources per rank (w2 at 32: 2 rank(s) per GPU, not 1)"
    )
    # their step stands beside the prediction, with no error
    assert at2.measured_step_time_s == 4 * MS and at2.measured_ranks_per_device == 2
    assert at2.measured_on_shared_device and at2.error is None
    assert prediction_cells(at2)[-2:] == ("4 ms", "2/GPU")
    assert (
        "measured at w2 with 2 ranks on one GPU (ddp): time-sliced (no MPS), not a GPU per rank as predicted: "
        "shown beside the prediction, no error given (no check of the model)"
    ) in forecast.notes
    record = steps_document(forecast)["predictions"][0]
    assert (record["measured_ranks_per_device"], record["error"]) == (2, None)


def test_a_profile_measured_on_a_shared_gpu_says_its_compute_is_time_sliced():
    forecast = step_predictions(_run(ONE_RANK, ONE_GPU), MODEL, [4], overlap=OVERLAP, from_world_size=2)
    (profile,) = forecast.profiles
    assert profile.ranks_per_device == 2
    assert (
        "ddp on w is predicted from w2, whose ranks shared a GPU (2 on one, time-sliced: no MPS): its compute is "
        "not a GPU's per rank, and the predictions from it are as slow"
    ) in forecast.notes


def test_the_overlap_slowdown_is_not_measured_from_ranks_sharing_a_gpu():
    shared = step_predictions(_run(ONE_RANK, ONE_GPU), MODEL, [2], from_world_size=1)
    assert shared.overlap.origin.startswith("stated, not measured")
    assert (
        "overlap slowdown not measured from the 1 ddp case(s) whose ranks shared a GPU (time-sliced: they measure "
        "the sharing)"
    ) in shared.notes
    stated = step_predictions(_run(ONE_RANK, ONE_GPU), MODEL, [2], from_world_size=1, overlap=OVERLAP)
    assert not any("overlap slowdown not" in n for n in stated.notes)  # the slowdown was given: nothing measured
    apart = step_predictions(_run(ONE_RANK, TWO_GPUS), MODEL, [2], from_world_size=1)
    assert apart.overlap.origin.startswith("measured") and not any("overlap slowdown not" in n for n in apart.notes)
