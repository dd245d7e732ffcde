"""dpbench.launch runs: info, per-step stats, and faults injected through custom Workloads."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from _launch_helpers import HANG_SECONDS, HEALTHY, assert_gone, faulty_workload, stray_children

import dpbench
from dpbench.launcher import WorkerError, WorkerTimeoutError, available_cores


@pytest.fixture(scope="module")
def ddp_run():
    with dpbench.launch("ddp", HEALTHY, world_size=2, global_batch=8, seed=4, lr=0.05) as run:
        yield run


def test_info_describes_the_run(ddp_run):
    info = ddp_run.info
    assert info.strategy == "ddp" and info.workload == HEALTHY.name
    assert info.world_size == 2 and info.device_type == "cpu" and info.backend == "gloo"
    assert info.global_batch == 8 and info.per_replica_batch == [4, 4]
    assert info.threads_per_worker == max(1, available_cores() // 2)
    assert info.seed == 4 and info.lr == 0.05 and info.devices == ["cpu", "cpu"]
    assert info.options["accumulation_steps"] == 1  # effective options, defaults included
    assert info.nodes == 1 and info.ranks_per_node == 2 and len(info.workers) == 2
    assert len(ddp_run.pids) == 2 and os.getpid() not in ddp_run.pids


def test_steps_continue_between_calls(ddp_run):
    first, second = ddp_run.step(2), ddp_run.step(3)
    assert first.steps == 2 and second.steps == 3
    assert set(first.peak_memory_bytes) == {"cpu:rank0", "cpu:rank1"}
    assert all(v > 0 for v in first.peak_memory_bytes.values())
    assert set(first.phases) == {"forward", "backward", "optimizer"}
    # Each call continues the batch sequence: no step repeats the first call's batches.
    assert first.losses[0] not in second.losses


def test_raise_in_forward_names_the_rank_with_traceback():
    run = dpbench.launch("ddp", faulty_workload("raise", 1), world_size=2, global_batch=8)
    pids = run.pids
    with pytest.raises(WorkerError, match="rank 1") as info:
        run.step(2)
    assert info.value.rank == 1
    assert "injected failure in forward on rank 1" in info.value.worker_traceback
    assert "forward" in info.value.worker_traceback
    assert_gone(pids)
    with pytest.raises(RuntimeError, match="closed"):
        run.step(1)
    run.close()  # idempotent after a failure


@pytest.mark.slow
def test_hanging_rank_times_out_and_leaves_no_process():
    others = {p.pid for p in stray_children()}
    run = dpbench.launch("ddp", faulty_workload("hang", 1), world_size=2, global_batch=8, timeout=3.0)
    pids = run.pids
    start = time.monotonic()
    with pytest.raises(WorkerTimeoutError):
        run.step(1)
    assert time.monotonic() - start < HANG_SECONDS / 10  # the timeout fired, not the sleep's end
    assert_gone(pids)
    assert {p.pid for p in stray_children()} <= others


@pytest.mark.slow
def test_timeout_is_per_step_not_per_call():
    # 10 steps of >= 0.3 s outlast the 2 s timeout, but every finished step is a sign of life.
    with dpbench.launch("ddp", faulty_workload("slow", -1), world_size=2, global_batch=8, timeout=2.0) as run:
        stats = run.step(10)
    assert stats.steps == 10 and stats.total_time > 2.0


def test_killed_worker_is_an_error_naming_it():
    run = dpbench.launch("ddp", HEALTHY, world_size=2, global_batch=8)
    pids = run.pids
    os.kill(pids[1], signal.SIGKILL)
    with pytest.raises(WorkerError, match="exit code -9") as info:
        run.step(1)
    assert 1 in info.value.failures
    assert_gone(pids)


@pytest.mark.slow
def test_ctrl_c_during_step_cleans_up(ctrl_c_raises):
    run = dpbench.launch("allreduce", faulty_workload("hang", 0), world_size=2, global_batch=8, timeout=120.0)
    pids = run.pids
    timer = threading.Timer(1.0, os.kill, args=(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            run.step(1)
    finally:
        timer.cancel()
        run.close()
    assert_gone(pids)


def test_in_process_strategy_runs_in_one_worker():
    with dpbench.launch("dp", HEALTHY, world_size=3, global_batch=8) as run:
        assert run.info.backend is None and run.info.processes == 1 and len(run.pids) == 1
        assert run.info.per_replica_batch == [3, 3, 2]
        assert run.info.threads_per_worker == max(1, available_cores() // 3)
        stats = run.step(1)
        assert set(stats.phases) == {"scatter", "replicate", "apply", "gather", "backward", "optimizer"}
        assert set(stats.peak_memory_bytes) == {"cpu:rank0"}
