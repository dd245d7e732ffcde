"""ddp's collective plan broadcasts the buffers as often as torch's DDP does in one of its steps:
once, before the first micro-batch's forward, however many micro-batches run under no_sync()."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from _groups import one_rank_group  # noqa: F401 (the fixture)
from _toy_workloads import BN

from dpbench.strategies import get_strategy
from dpbench.strategies.base import RunSpec


def _trainer(group, **options):
    cls = get_strategy("ddp")
    resolved = cls.parse_options(options, device="cpu", world_size=1, global_batch=12)
    spec = RunSpec(
        strategy="ddp",
        options=resolved,
        world_size=1,
        global_batch=12,
        per_replica_batch=tuple(cls.per_replica_batch(12, 1, resolved)),
        device_type="cpu",
        devices=("cpu",),
        backend="gloo",
        seed=0,
        lr=0.05,
        threads_per_worker=1,
    )
    ctx = SimpleNamespace(rank=0, world_size=1, device=torch.device("cpu"), group=group, at_close=lambda fn: None)
    trainer = cls(spec, BN, ctx)
    trainer.setup()
    return trainer


@pytest.mark.slow  # DistributedDataParallel's first construction imports a lot (~8 s on a busy machine)
def test_one_buffer_sync_per_step_under_accumulation_as_the_plan_has(one_rank_group):  # noqa: F811 (the fixture)
    trainer = _trainer(one_rank_group, accumulation_steps=3)
    calls = []
    real = trainer.ddp._distributed_broadcast_coalesced

    def counted(tensors, bucket_size, authoritative_rank=0):
        calls.append({str(t.dtype).replace("torch.", "") for t in tensors})
        return real(tensors, bucket_size, authoritative_rank)

    trainer.ddp._distributed_broadcast_coalesced = counted
    x, y = BN.batch(0, 12, 0)
    for _ in range(2):
        trainer.train_step(x, y)
    # torch: one coalesced broadcast of every buffer per step (3 forwards each)
    assert len(calls) == 2
    plan = [c for c in trainer.collective_plan() if c.op == "broadcast"]
    # the plan: that one sync, a broadcast per dtype it flattens (BatchNorm: float32 statistics, int64 count)
    assert sorted(c.dtype for c in plan) == sorted(calls[0]) == ["float32", "int64"]
    buffers = dict(trainer.ddp.module.named_buffers())
    assert sum(c.numel for c in plan) == sum(b.numel() for b in buffers.values())
