"""The registered workloads train identically under every strategy, and lenet learns.

Stateful workloads (BatchNorm, dropout: resnet18) are left out on purpose: their replicas
legitimately differ from ``single`` (see test_batchnorm.py for those semantics).
"""

from __future__ import annotations

import statistics

import pytest
import torch

import dpbench

WORLD = 2
LR = 0.3
# (steps, global batch): odd batches so the two replicas get uneven slices.
PLAN = {"lenet": (12, 31)}
DEFAULT_PLAN = (2, 15)
STRATEGIES = [("dp", {}), ("manual", {}), ("ddp", {}), ("allreduce", {"mode": "overlap"}), ("fsdp", {}), ("zero", {})]
WORKLOADS = [name for name in dpbench.list_workloads() if not dpbench.get_workload(name).stateful]


def train(strategy: str, workload: str, world_size: int, **options):
    steps, global_batch = PLAN.get(workload, DEFAULT_PLAN)
    with dpbench.launch(
        strategy, workload, world_size=world_size, global_batch=global_batch, seed=1, lr=LR, **options
    ) as run:
        stats = run.step(steps)
        return run.parameters(), stats.losses


@pytest.fixture(scope="module")
def single_runs():
    cache: dict[str, tuple] = {}

    def get(workload: str):
        if workload not in cache:
            cache[workload] = train("single", workload, 1)
        return cache[workload]

    return get


def test_registered_non_stateful_workloads_are_covered():
    assert {"mlp", "lenet", "transformer", "dict_model"} <= set(WORKLOADS)


@pytest.mark.parametrize("strategy,options", STRATEGIES, ids=[s for s, _ in STRATEGIES])
@pytest.mark.parametrize("workload", WORKLOADS)
@pytest.mark.slow
def test_matches_single(workload, strategy, options, single_runs):
    ref_params, ref_losses = single_runs(workload)
    params, losses = train(strategy, workload, WORLD, **options)
    assert set(params) == set(ref_params)
    for name, expected in ref_params.items():
        torch.testing.assert_close(
            params[name], expected, atol=1e-4, rtol=1e-3, msg=lambda m, name=name: f"{name}: {m}"
        )
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), atol=1e-4, rtol=1e-3)
    if workload == "lenet":
        # Synthetic Fashion-MNIST-shaped data with learnable structure: the loss must go down.
        assert statistics.mean(losses[-4:]) < statistics.mean(losses[:4]) - 0.03, losses


def test_lenet_learns_under_single(single_runs):
    _, losses = single_runs("lenet")
    assert statistics.mean(losses[-4:]) < statistics.mean(losses[:4]) - 0.03, losses
