"""WorkerPool: per-rank calls, state between calls, and failures turned into parent-side errors."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from _launch_helpers import (
    HANG_SECONDS,
    assert_gone,
    describe,
    die_on,
    fail_on,
    listening_ports,
    recall,
    remember,
    sleep_on,
    stray_children,
    unpicklable_result,
)

from dpbench.launcher import WorkerError, WorkerPool, WorkerTimeoutError, default_threads


@pytest.fixture(scope="module")
def pool():
    with WorkerPool(2, timeout=30.0) as workers:
        yield workers


def test_every_rank_runs_with_a_process_group(pool):
    results = pool.run(describe)
    assert [r["rank"] for r in results] == [0, 1]
    assert [r["dist_rank"] for r in results] == [0, 1]
    assert all(r["world_size"] == 2 and r["backend"] == "gloo" and r["device"] == "cpu" for r in results)
    assert all(r["sum"] == 3.0 for r in results)  # all_reduce of 1 + 2 across the two ranks
    assert all(r["threads"] == pool.threads_per_worker == default_threads(2) for r in results)
    assert [r["pid"] for r in results] == pool.pids and os.getpid() not in pool.pids


def test_the_pool_offers_everything_the_pool_protocol_lists(pool):
    from dpbench.workers.base import Pool

    members = {name for name in vars(Pool) if not name.startswith("_")} | {"__enter__", "__exit__"}
    assert {name for name in members if not hasattr(pool, name)} == set()
    assert pool.on_head_node(1) and pool.host_of(1) == pool.layout().hosts[0]


def test_state_survives_between_calls(pool):
    pool.run(remember, 10)
    assert pool.run(recall) == [10, 20]


def test_unpicklable_function_is_rejected_before_sending(pool):
    pool.run(remember, 10)  # its own state: the test must not depend on which test ran before it
    with pytest.raises(TypeError, match="picklable"):
        pool.run(lambda ctx: ctx.rank)
    assert pool.run(recall) == [10, 20]  # the pool is still usable


def test_unpicklable_result_is_the_ranks_error_with_traceback():
    workers = WorkerPool(1, process_group=False)
    with pytest.raises(WorkerError, match="rank 0") as info:
        workers.run(unpicklable_result)
    assert "pickle" in info.value.worker_traceback.lower()
    assert workers.closed


def test_pool_without_process_group_and_threads():
    with WorkerPool(1, process_group=False, threads_per_worker=1) as workers:
        (info,) = workers.run(recall_or_none)
        assert info == (None, None, 1)


def recall_or_none(ctx):
    import torch
    import torch.distributed as dist

    return ctx.backend, ctx.group if not dist.is_initialized() else "initialised", torch.get_num_threads()


def test_raising_rank_is_named_with_its_traceback():
    workers = WorkerPool(2, timeout=30.0)
    pids = workers.pids
    with pytest.raises(WorkerError, match="rank 1") as info:
        workers.run(fail_on, 1)
    assert info.value.rank == 1
    assert "injected failure on rank 1" in info.value.worker_traceback
    assert "fail_on" in info.value.worker_traceback  # the worker's own frames, not the parent's
    assert workers.closed
    assert_gone(pids)
    with pytest.raises(RuntimeError, match="closed"):
        workers.run(recall)


@pytest.mark.slow
def test_silent_rank_times_out_and_is_cleaned_up():
    workers = WorkerPool(2, timeout=2.0)
    pids = workers.pids
    start = time.monotonic()
    with pytest.raises(WorkerTimeoutError, match="timeout") as info:
        workers.run(sleep_on, 1)
    # Relative bound: the error came from the timeout, not from the sleep finishing.
    assert time.monotonic() - start < HANG_SECONDS / 10
    assert 1 in info.value.failures
    assert_gone(pids)


def test_rank_killing_itself_is_reported_with_exit_code():
    workers = WorkerPool(2, timeout=30.0)
    pids = workers.pids
    with pytest.raises(WorkerError, match="died with exit code -9") as info:
        workers.run(die_on, 1)
    assert 1 in info.value.failures
    assert_gone(pids)


@pytest.mark.slow
def test_ctrl_c_while_waiting_stops_the_workers(ctrl_c_raises):
    before, others = listening_ports(), {p.pid for p in stray_children()}
    workers = WorkerPool(2, timeout=120.0)
    pids = workers.pids
    # A real SIGINT to this process, as a terminal Ctrl-C delivers (workers ignore it).
    timer = threading.Timer(1.0, os.kill, args=(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            workers.run(sleep_on, 0)
    finally:
        timer.cancel()
    assert workers.closed
    assert_gone(pids)
    assert {p.pid for p in stray_children()} <= others
    assert listening_ports() <= before


def test_close_is_idempotent_and_leaves_nothing():
    others = {p.pid for p in stray_children()}  # e.g. the module's shared pool
    workers = WorkerPool(2)
    pids = workers.pids
    workers.close()
    workers.close()
    assert_gone(pids)
    assert {p.pid for p in stray_children()} <= others


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"world_size": 0}, "world_size must be an int >= 1, got 0"),
        ({"world_size": 2, "device": "tpu"}, "device must be 'cpu' or 'cuda', got 'tpu'"),
        ({"world_size": 2, "timeout": 0}, "timeout must be a positive number"),
        ({"world_size": 2, "threads_per_worker": 0}, "threads_per_worker must be None or an int >= 1"),
        ({"world_size": 2, "backend": "mpi"}, "backend must be None, 'gloo' or 'nccl'"),
        ({"world_size": 2, "backend": "nccl"}, "backend='nccl' needs device='cuda'"),
    ],
)
def test_bad_arguments_fail_before_any_process_starts(kwargs, message):
    before = {p.pid for p in stray_children()}
    world_size = kwargs.pop("world_size")
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        WorkerPool(world_size, **kwargs)
    assert {p.pid for p in stray_children()} == before


def test_a_helper_still_exiting_is_waited_for_and_a_live_one_is_not_called_gone(monkeypatch):
    import dpbench.workers.pool as pool_module

    answers = iter([True, True, True, False])  # alive while its pipes close, then dead
    monkeypatch.setattr(pool_module, "_helper_alive", lambda: next(answers))
    assert pool_module._helper_gone(within=5.0) is True
    assert next(answers, "used up") == "used up"  # asked until it showed dead, not once
    monkeypatch.setattr(pool_module, "_helper_alive", lambda: True)
    started = time.monotonic()
    assert pool_module._helper_gone(within=0.2) is False
    assert 0.2 <= time.monotonic() - started < 2.0


def compile_slowly(ctx, seconds, window):
    """Rank 1 is busy for ``seconds`` without a word (a cold torch.compile) inside a keep-alive window
    of ``window`` s; rank 0, done first, waits for it in a collective, as in a compiled warm-up step."""
    import torch.distributed as dist

    with ctx.keep_alive(window):
        if ctx.rank == 1:
            time.sleep(seconds)
        dist.barrier()
    return ctx.rank


@pytest.mark.slow
def test_a_compile_slower_than_the_timeout_finishes_and_a_hung_one_is_still_caught():
    # The timeouts scaled down: a rank may stay silent 2 s, the process group waits 8 s in a collective.
    with WorkerPool(2, timeout=2.0, collective_timeout=8.0) as workers:
        assert workers.run(compile_slowly, 4.0, 6.0) == [0, 1]  # twice the timeout, beating throughout
        start = time.monotonic()
        with pytest.raises(WorkerTimeoutError, match="for 2 s") as info:
            workers.run(compile_slowly, HANG_SECONDS, 1.0)  # past its window the beats stop
        assert time.monotonic() - start < HANG_SECONDS / 10 and 1 in info.value.failures


@pytest.mark.parametrize("value", [0, -1.0, True, "8"])
def test_a_bad_collective_timeout_fails_before_any_process_starts(value):
    with pytest.raises(ValueError, match=r"^collective_timeout must be None or a positive number of seconds, got "):
        WorkerPool(2, collective_timeout=value)
