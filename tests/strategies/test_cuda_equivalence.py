"""The same equivalence on CUDA (skipped with a reason on machines without a GPU).

World size is 2 when there are two GPUs, else 2 replicas share one GPU (dp with
replicas_per_device=2, ddp/allreduce over gloo on the shared device). torch-dp needs one
GPU per replica. Tolerances are looser than on CPU: cuDNN/cuBLAS reduce in other orders.
"""

from __future__ import annotations

import pytest
import torch
from _toy_workloads import MLP

import dpbench

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

K, GLOBAL_BATCH, LR = 3, 11, 0.1


def gpus() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def train(strategy: str, world_size: int, **options):
    with dpbench.launch(
        strategy, MLP, world_size=world_size, global_batch=GLOBAL_BATCH, device="cuda", seed=3, lr=LR, **options
    ) as run:
        stats = run.step(K)
        assert all(label.startswith("cuda:") for label in stats.peak_memory_bytes)
        return run.parameters(), run.info


@pytest.fixture(scope="module")
def reference():
    return train("single", 1)[0]


CASES = [
    ("dp", {"replicas_per_device": 1 if gpus() >= 2 else 2}),
    ("manual", {}),
    ("ddp", {}),
    ("allreduce", {"mode": "overlap", "bucket_cap_mb": 0.0005}),
    ("torch-dp", {}),
]


@pytest.mark.parametrize("strategy,options", CASES, ids=[c[0] for c in CASES])
def test_cuda_parameters_match_single(strategy, options, reference):
    if strategy == "torch-dp" and gpus() < 2:
        pytest.skip("torch-dp with two replicas needs two GPUs")
    params, info = train(strategy, 2, **options)
    assert info.device_type == "cuda"
    for name, expected in reference.items():
        torch.testing.assert_close(
            params[name], expected, atol=1e-4, rtol=1e-3, msg=lambda m, name=name: f"{name}: {m}"
        )


# "The parent never initialises CUDA" is checked in a fresh interpreter: test_parent_cuda.py
# (this process may hold a context from earlier GPU tests).


def test_powersgd_runs_on_nccl(reference):
    if gpus() < 2:
        pytest.skip("comm_hook='powersgd' needs nccl, i.e. one GPU per rank: needs 2 GPUs")
    with dpbench.launch(
        "ddp", MLP, world_size=2, global_batch=GLOBAL_BATCH, device="cuda", seed=3, lr=LR, comm_hook="powersgd"
    ) as run:
        stats = run.step(K)
        params = run.parameters()
    assert all(torch.isfinite(torch.tensor(stats.losses)))
    assert all(torch.isfinite(p).all() for p in params.values())
