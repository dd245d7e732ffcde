"""Which GPU a worker takes, and how per-device memory is named across hosts: on CPU, with a
fake ``torch.cuda`` surface at the module boundary and a fake pool."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from dpbench.workers.worker import _worker_device


@pytest.fixture
def four_gpus(monkeypatch):
    chosen = []
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    return chosen


def test_one_host_uses_the_rank_as_the_local_index(four_gpus):
    assert _worker_device(1, "cuda") == torch.device("cuda", 1)
    assert _worker_device(5, "cuda") == torch.device("cuda", 1)  # more ranks than GPUs: they share
    assert four_gpus == [1, 1]


def test_a_cluster_rank_takes_the_gpu_of_its_local_rank_not_of_its_global_rank(four_gpus):
    # Two ranks per 4-GPU node: global rank 2 is node 1's first rank (LOCAL_RANK 0), whose CPU
    # block is the node's first too; rank % 4 would put it on cuda:2.
    assert _worker_device(2, "cuda", local_rank=0) == torch.device("cuda", 0)
    assert _worker_device(3, "cuda", local_rank=1) == torch.device("cuda", 1)
    assert four_gpus == [0, 1]


def test_the_agent_hands_the_worker_its_local_rank():
    from dpbench.cluster.agent import WorkerOrder, _worker_config

    order = WorkerOrder(
        pool_id="p",
        rank=3,
        world_size=4,
        device_type="cuda",
        backend="nccl",
        timeout=5.0,
        threads=1,
        affinity="off",
        cores_per_worker=None,
        local_index=1,
        local_count=2,
        store_host="127.0.0.1",
        store_port=1,
        sys_path=(),
    )
    config = _worker_config(order)
    assert config.local_rank == 1 == int(config.environ["LOCAL_RANK"])


def test_cpu_workers_ignore_the_local_rank():
    assert _worker_device(3, "cpu", local_rank=1) == torch.device("cpu")


# -- memory labels of ranks on other hosts -------------------------------------------------------
class _TwoNodePool:
    """The surface Run.step uses of a RemotePool: ranks 0-1 on the head node, 2-3 on n1."""

    closed = False

    def run(self, fn, *args):
        return [
            {"times": [0.1], "loss_parts": [0.25], "phases": {}, "memory": {f"cuda:{r % 2}": 100 + r}} for r in range(4)
        ]

    def on_head_node(self, rank):
        return rank < 2

    def host_of(self, rank):
        return "n0" if rank < 2 else "n1"


def test_another_nodes_cuda_0_is_not_added_to_this_nodes_cuda_0():
    from dpbench.launcher.run import Run

    run = Run.__new__(Run)
    run._pool = _TwoNodePool()
    run.spec = SimpleNamespace(global_batch=8)
    stats = run.step(1)
    assert stats.peak_memory_bytes == {"cuda:0": 100, "cuda:1": 101, "n1/cuda:0": 102, "n1/cuda:1": 103}


def test_worker_facts_survive_mixed_tf32_apis():
    """torch 2.13's legacy getter raises once the new per-backend API was used too; a worker
    reporting its facts must not die of it (it would on its first GPU run with such a script)."""
    from dpbench.workers.worker import worker_facts

    before = torch.backends.cuda.matmul.fp32_precision
    try:
        torch.set_float32_matmul_precision("highest")
        torch.backends.cuda.matmul.fp32_precision = "tf32"  # new API: now the legacy getter raises
        facts = worker_facts(0, "cpu", None)
        assert facts["float32_matmul_precision"] == "fp32_precision=tf32"
    finally:  # back to torch's initial state: legacy "highest", new API "none"
        torch.set_float32_matmul_precision("highest")
        torch.backends.cuda.matmul.fp32_precision = before
