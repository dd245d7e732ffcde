"""Ranks sharing one GPU run gloo: the breakdown counts the host-side collectives and the copies
they launch as communication (a trace without nccl kernels is not communication-free)."""

from __future__ import annotations

import pytest
from _kineto import cuda_gloo_rank, cuda_rank, write

from dpbench.traces.analysis import analyse_case, analyse_rank

US = 1e-6


def _close(value):
    return pytest.approx(value, rel=1e-9, abs=1e-12)


def test_gloo_on_a_gpu_counts_the_host_collective_and_its_copies_as_communication():
    rank = analyse_rank(cuda_gloo_rank())
    assert rank["device_kind"] == "cuda" and rank["comm_transport"] == "host"
    (s,) = rank["steps"]
    assert (s["compute_s"], s["comm_s"], s["overlap_s"], s["exposed_comm_s"], s["idle_s"]) == (
        _close(40 * US),
        _close(30 * US),
        _close(10 * US),
        _close(20 * US),
        _close(40 * US),
    )
    assert [(c["seq"], c["name"]) for c in rank["collectives"]] == [(0, "c10d::allreduce_")]
    assert rank["collectives"][0]["arrival_s"] == _close(50 * US)


def test_two_gloo_ranks_on_one_gpu_have_a_skew_and_a_straggler(tmp_path):
    late = cuda_gloo_rank()
    late["baseTimeNanoseconds"] += 3_000  # rank 1 reaches the all-reduce 3 µs later on the wall clock
    late["distributedInfo"]["rank"] = 1
    case = analyse_case([write(tmp_path / "rank0.json.gz", cuda_gloo_rank()), write(tmp_path / "rank1.json.gz", late)])
    assert case["comm_transport"] == "host" and case["skew"]["collectives"] == 1
    assert case["skew"]["straggler"] == 1 and case["skew"]["max_skew_s"] == _close(3 * US)
    assert all(r["comm_s"] == _close(30 * US) for r in case["ranks"])


def test_nccl_kernels_keep_the_device_transport():
    assert analyse_rank(cuda_rank())["comm_transport"] == "device"
