"""BatchNorm semantics per strategy, against references computed here in the test process.

* ``single`` normalises with the statistics of the whole global batch.
* ``dp``, ``manual``, ``ddp`` (without SyncBatchNorm) and ``allreduce`` normalise each
  replica's slice with that slice's statistics, and the trained model carries the running
  statistics of replica / rank 0 (its slice only).
* ``ddp`` with ``sync_batchnorm=True`` needs CUDA (torch's SyncBatchNorm rejects CPU input).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _toy_workloads import BN

import dpbench
from dpbench.strategies import StrategyUnavailable
from dpbench.strategies.base import split_sizes

K = 3
GLOBAL_BATCH = 10
WORLD = 2
LR = 0.1
SEED = 5


def run_strategy(strategy: str, world_size: int, device: str = "cpu", **options):
    with dpbench.launch(
        strategy, BN, world_size=world_size, global_batch=GLOBAL_BATCH, seed=SEED, lr=LR, device=device, **options
    ) as run:
        run.step(K)
        return run.parameters(), run.buffers()


def reference(per_slice: bool):
    """K SGD steps in this process: global BN statistics, or per-slice ones with replica 0's running stats."""
    torch.manual_seed(SEED)
    model = BN.model()
    sizes = split_sizes(GLOBAL_BATCH, WORLD)
    for step in range(K):
        x, y = BN.batch(step, GLOBAL_BATCH, SEED)
        model.zero_grad(set_to_none=True)
        if not per_slice:
            F.cross_entropy(model(x), y).backward()
        else:
            start, kept = 0, None
            for rank, size in enumerate(sizes):
                loss = F.cross_entropy(model(x[start : start + size]), y[start : start + size])
                (loss * size / GLOBAL_BATCH).backward()
                start += size
                if rank == 0:  # replica 0's running statistics are the ones that survive
                    kept = {n: b.clone() for n, b in model.named_buffers()}
            with torch.no_grad():
                for name, buf in model.named_buffers():
                    buf.copy_(kept[name])
        with torch.no_grad():
            for p in model.parameters():
                p -= LR * p.grad
    return ({n: p.detach() for n, p in model.named_parameters()}, {n: b.detach() for n, b in model.named_buffers()})


@pytest.fixture(scope="module")
def references():
    return reference(per_slice=False), reference(per_slice=True)


def assert_same(actual, expected, atol=1e-5):
    assert set(actual) == set(expected)
    for name in expected:
        torch.testing.assert_close(
            actual[name].float(), expected[name].float(), atol=atol, rtol=1e-4, msg=lambda m, name=name: f"{name}: {m}"
        )


def test_references_differ(references):
    (global_params, _), (slice_params, _) = references
    # Otherwise the per-strategy checks below could not tell the two semantics apart.
    assert max((global_params[n] - slice_params[n]).abs().max().item() for n in global_params) > 1e-3


def test_single_uses_global_batch_statistics(references):
    (global_params, global_buffers), _ = references
    params, buffers = run_strategy("single", 1)
    assert_same(params, global_params)
    assert_same(buffers, global_buffers)


@pytest.mark.parametrize(
    "strategy,options",
    [
        ("dp", {}),
        ("manual", {}),
        ("ddp", {}),
        ("allreduce", {"mode": "overlap"}),
    ],
    ids=["dp", "manual", "ddp", "allreduce"],
)
def test_replicas_use_their_slice_statistics(strategy, options, references):
    _, (slice_params, slice_buffers) = references
    params, buffers = run_strategy(strategy, WORLD, **options)
    assert_same(params, slice_params)
    assert_same(buffers, slice_buffers)


def test_sync_batchnorm_needs_cuda():
    with pytest.raises(StrategyUnavailable, match="sync_batchnorm needs device='cuda'"):
        dpbench.launch("ddp", BN, world_size=WORLD, global_batch=GLOBAL_BATCH, sync_batchnorm=True)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 1, reason="needs CUDA")
def test_sync_batchnorm_matches_single_on_cuda(references):
    (global_params, _), _ = references
    params, _ = run_strategy("ddp", WORLD, device="cuda", sync_batchnorm=True)
    assert_same(params, global_params, atol=1e-4)
