"""Real CPU pinning of WorkerPool workers on this machine, the parent's affinity, and worker facts."""

from __future__ import annotations

import json
import os
import threading

import pytest
from _launch_helpers import fail_on, stray_children

from dpbench.launcher import WorkerError, WorkerPool
from dpbench.sampler import ResourceSampler
from dpbench.workers.affinity import pinning_supported

pytestmark = pytest.mark.skipif(
    not pinning_supported() or len(os.sched_getaffinity(0)) < 2 or not os.path.isdir("/proc/self/task"),
    reason="needs Linux sched_setaffinity, /proc and at least 2 usable cores",
)


def _allowed(pid: int) -> dict[int, set[int]]:
    """Every thread of ``pid`` → its Cpus_allowed_list, read from /proc (not from the process itself)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as fh:
                line = next(x for x in fh if x.startswith("Cpus_allowed_list:"))
        except (OSError, StopIteration):
            continue  # the thread exited meanwhile
        cores = set()
        for part in line.split()[1].split(","):
            lo, _, hi = part.partition("-")
            cores.update(range(int(lo), int(hi or lo) + 1))
        out[int(tid)] = cores
    return out


def parallel_work_then_threads(ctx, threads: int) -> dict:
    """Run intra-op parallel work with ``threads`` threads; report every thread's allowed cores."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    a = torch.randn(384, 384)
    for _ in range(10):
        a = torch.tanh(a @ a)
    allowed = _allowed(os.getpid())
    torch.set_num_threads(before)
    return {"tids": {str(t): sorted(c) for t, c in allowed.items()}, "affinity": sorted(os.sched_getaffinity(0))}


@pytest.fixture
def cores() -> set[int]:
    return set(os.sched_getaffinity(0))


@pytest.fixture(autouse=True)
def _pin_not_forced_off(monkeypatch):
    monkeypatch.delenv("DPBENCH_PIN", raising=False)


@pytest.mark.slow  # 4.3-5.2 s on 2026-12-02 (two workers started and checked twice): over the fast tier's 5 s once
def test_two_ranks_each_get_their_own_core_and_their_threads_stay_there(cores):
    with WorkerPool(2, threads_per_worker=1, timeout=30.0) as pool:
        plan = pool.affinity_plan
        assert plan["mode"] == "auto" and plan["pinned"], plan
        per_rank = [set(c) for c in plan["rank_cores"]]
        assert len(per_rank[0]) == len(per_rank[1]) == len(cores) // 2 and not per_rank[0] & per_rank[1]
        assert [set(f["cpu_affinity"]) for f in pool.worker_facts] == per_rank
        # More intra-op threads than cores, on purpose: OpenMP threads born now must inherit
        # the worker's affinity, as gloo's threads born at start did.
        results = pool.run(parallel_work_then_threads, 2)
        for rank, (result, pid) in enumerate(zip(results, pool.pids)):
            assert len(result["tids"]) >= 3, result  # main + OpenMP worker + gloo threads at least
            assert all(set(c) == per_rank[rank] for c in result["tids"].values()), (rank, result)
            assert all(c == per_rank[rank] for c in _allowed(pid).values())  # seen from outside too
        assert os.sched_getaffinity(0) == cores  # no spare core on 2 cores: the parent stays


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_pinning_off_leaves_workers_on_every_core(monkeypatch, cores, how):
    kwargs = {"affinity": "off"} if how == "argument" else {}
    if how == "environment":
        monkeypatch.setenv("DPBENCH_PIN", "0")
    with WorkerPool(2, threads_per_worker=1, timeout=30.0, **kwargs) as pool:
        plan = pool.affinity_plan
        assert plan["mode"] == "off" and not plan["pinned"] and plan["rank_cores"] is None
        assert plan["reason"] == ("affinity='off'" if how == "argument" else "DPBENCH_PIN=0 in the environment")
        assert [set(f["cpu_affinity"]) for f in pool.worker_facts] == [cores, cores]
        assert all(c == cores for pid in pool.pids for c in _allowed(pid).values())
        assert os.sched_getaffinity(0) == cores


def test_spare_cores_hold_the_parent_and_the_sampler_until_close(cores):
    parked = threading.Event()
    helper = threading.Thread(target=parked.wait, args=(60,), daemon=True)  # a parent thread born before
    helper.start()
    try:
        with WorkerPool(1, threads_per_worker=1, cores_per_worker=1, process_group=False) as pool:
            plan = pool.affinity_plan
            rank, parent = set(plan["rank_cores"][0]), set(plan["parent_cores"])
            assert len(rank) == 1 and parent == cores - rank and plan["parent_note"] is None
            assert set(pool.worker_facts[0]["cpu_affinity"]) == rank
            assert os.sched_getaffinity(0) == parent
            assert os.sched_getaffinity(helper.native_id) == parent  # every parent thread moved
            with ResourceSampler(0.02, pids=pool.pids, backend="cpu") as sampler:
                pass
            assert set(sampler.summary()["thread_cpus"]) == parent
        assert os.sched_getaffinity(0) == cores
        assert os.sched_getaffinity(helper.native_id) == cores
    finally:
        parked.set()
        helper.join()


def test_parent_is_restored_after_a_worker_failure(cores):
    pool = WorkerPool(1, threads_per_worker=1, cores_per_worker=1, process_group=False)
    assert os.sched_getaffinity(0) != cores
    with pytest.raises(WorkerError, match="injected failure on rank 0"):
        pool.run(fail_on, 0)
    assert pool.closed and os.sched_getaffinity(0) == cores


def test_a_second_open_pool_plans_inside_the_first_ones_spare_cores(cores):
    first = WorkerPool(1, threads_per_worker=1, cores_per_worker=1, process_group=False)
    try:
        spare = set(first.affinity_plan["parent_cores"])
        with WorkerPool(1, threads_per_worker=1, process_group=False) as second:
            assert set(second.affinity_plan["available_cores"]) == spare
            assert set(second.worker_facts[0]["cpu_affinity"]) <= spare
        assert os.sched_getaffinity(0) == spare  # the second pool did not undo the first one's move
    finally:
        first.close()
    assert os.sched_getaffinity(0) == cores


def test_worker_facts_are_json_and_describe_the_worker():
    with WorkerPool(2, threads_per_worker=1, timeout=30.0) as pool:
        facts = pool.worker_facts
        assert json.loads(json.dumps(facts)) == facts
        assert [f["rank"] for f in facts] == [0, 1] and [f["pid"] for f in facts] == pool.pids
        for f in facts:
            assert f["torch_threads"] == 1 and f["interop_threads"] == 1 and f["affinity_error"] is None
            assert f["cudnn_benchmark"] is None and f["cudnn_deterministic"] is None  # CPU pool
            assert f["env"]["OMP_NUM_THREADS"] == f["env"]["MKL_NUM_THREADS"] == "1"
            assert f["env"]["GLOO_SOCKET_IFNAME"] == "lo"
            assert all(
                k.startswith(("NCCL_", "TORCH_NCCL_", "GLOO_", "TORCH_GLOO_", "OMP_", "GOMP_", "MKL_", "KMP_"))
                or k in ("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "NVIDIA_TF32_OVERRIDE")  # set in NGC's images
                for k in f["env"]
            )
            assert all(k.startswith(("OMP_", "GOMP_", "KMP_", "MKL_")) for k in f["runtime_env"])
        facts[0]["env"]["X"] = "1"  # a copy: the pool's record is not changed through it
        assert "X" not in pool.worker_facts[0]["env"]


def test_nccl_settings_reach_the_facts(monkeypatch):
    monkeypatch.setenv("NCCL_ALGO", "Ring")
    monkeypatch.setenv("NCCL_PROTO", "Simple")
    with WorkerPool(1, process_group=False) as pool:
        env = pool.worker_facts[0]["env"]
    assert env["NCCL_ALGO"] == "Ring" and env["NCCL_PROTO"] == "Simple"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"affinity": "on"}, "affinity must be one of 'auto', 'off', got 'on'"),
        ({"affinity": None}, "affinity must be one of 'auto', 'off', got None"),
        ({"cores_per_worker": 0}, "cores_per_worker must be None or an int >= 1, got 0"),
    ],
)
def test_bad_affinity_arguments_fail_before_any_process_starts(kwargs, message):
    before = {p.pid for p in stray_children()}
    with pytest.raises(ValueError) as info:
        WorkerPool(2, **kwargs)
    assert message in str(info.value)
    assert {p.pid for p in stray_children()} == before


def test_bad_dpbench_pin_value_is_rejected(monkeypatch):
    monkeypatch.setenv("DPBENCH_PIN", "maybe")
    with pytest.raises(ValueError, match="DPBENCH_PIN must be '0' .* got 'maybe'"):
        WorkerPool(1)
