"""Checks that run *inside* a dpbench.cluster session (the head's pytest), started by
test_cluster_runs.py through two torchrun agents: ``-m dpbench.cluster tests/cluster/cluster_checks.py``.

Not collected on its own (the name does not start with ``test_``): outside a cluster session
there is no torchrun world to check. Module-level workload functions, so the workers on
every node can unpickle them (the agents add the head's import path, this directory included).
"""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import dpbench
from dpbench.cluster.remote import RemotePool, active_session
from dpbench.launcher import WorkerError, make_pool

# Run inside a torchrun cluster by test_cluster_runs.py (multi-process by nature): outside the fast
# tier, so tests/conftest.py's time guard leaves them alone.
pytestmark = pytest.mark.slow

K = 3
GLOBAL_BATCH = 11  # uneven over 4 ranks (3+3+3+2): the loss weighting is exercised across nodes


def tiny_mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(12, 16), nn.Tanh(), nn.Linear(16, 5))


def random_batch(step: int, global_batch: int, seed: int):
    gen = torch.Generator().manual_seed(seed * 100_003 + step)
    return torch.randn(global_batch, 12, generator=gen), torch.randint(0, 5, (global_batch,), generator=gen)


def cross_entropy(output, target):
    return F.cross_entropy(output, target)


TOY = dpbench.Workload(model=tiny_mlp, batch=random_batch, loss=cross_entropy, name="toy-mlp")


def where(ctx):
    import torch.distributed as dist

    total = torch.tensor([float(ctx.rank + 1)])
    dist.all_reduce(total, group=ctx.group)
    return {
        "rank": ctx.rank,
        "dist_rank": dist.get_rank(),
        "world": dist.get_world_size(),
        "sum": total.item(),
        "pid": os.getpid(),
        "node_env": os.environ.get("GROUP_RANK"),
        "host": socket.gethostname(),
    }


def fail_on_last(ctx):
    if ctx.rank == ctx.world_size - 1:
        raise ValueError(f"injected failure on rank {ctx.rank}")
    return ctx.rank


def _train(strategy: str, world_size: int, **options):
    with dpbench.launch(
        strategy, TOY, world_size=world_size, global_batch=GLOBAL_BATCH, seed=3, lr=0.1, timeout=60.0, **options
    ) as run:
        run.step(K)
        return run.parameters(), run.info, list(run.pids)


@pytest.fixture(scope="module")
def world():
    session = active_session()
    assert session is not None, "run through python -m dpbench.cluster under torchrun"
    return session.world_size


@pytest.fixture(scope="module")
def reference():
    params, info, _ = _train("single", 1)
    assert info.nodes == 1 and info.ranks_per_node == 1  # in-process: on the head's node
    return params


@pytest.mark.parametrize("strategy,options", [("ddp", {}), ("allreduce", {"mode": "overlap", "bucket_cap_mb": 0.0001})])
def test_parameters_after_k_steps_equal_single(world, reference, strategy, options):
    params, info, pids = _train(strategy, world, **options)
    assert info.nodes == 2 and info.ranks_per_node == world // 2 and len(info.hosts) == 2
    assert [w["node"] for w in info.workers] == [r * 2 // world for r in range(world)]
    assert len(pids) == world // 2  # the sampler watches the head node's workers only
    assert params.keys() == reference.keys()
    for name, value in reference.items():
        torch.testing.assert_close(params[name], value, atol=1e-5, rtol=1e-5, msg=f"{strategy} {name}")


def test_remote_pool_spans_the_nodes_and_names_a_failing_rank(world):
    pool = make_pool(world, timeout=30.0)
    with pool:
        assert isinstance(pool, RemotePool) and pool.nodes == 2 and pool.ranks_per_node == world // 2
        out = pool.run(where)
        assert [o["dist_rank"] for o in out] == list(range(world)) and {o["world"] for o in out} == {world}
        assert {o["sum"] for o in out} == {world * (world + 1) / 2}
        assert [o["node_env"] for o in out] == [str(r * 2 // world) for r in range(world)]
        with pytest.raises(WorkerError, match=rf"(?s)rank {world - 1} \(node 1, host [^)]+\).*injected failure") as err:
            pool.run(fail_on_last)
        assert err.value.rank == world - 1
    assert pool.closed
