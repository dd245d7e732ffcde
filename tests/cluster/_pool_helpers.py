"""Module-level per-rank functions for the RemotePool tests (workers unpickle them by reference)."""

from __future__ import annotations

import os
import signal
import time


def describe(ctx):
    import torch
    import torch.distributed as dist

    total = torch.tensor([float(ctx.rank + 1)])
    dist.all_reduce(total, group=ctx.group)
    return {
        "rank": ctx.rank,
        "world": dist.get_world_size(),
        "sum": total.item(),
        "pid": os.getpid(),
        "env_rank": os.environ.get("RANK"),
        "ifname": os.environ.get("GLOO_SOCKET_IFNAME"),
    }


def fail_on(ctx, rank):
    if ctx.rank == rank:
        raise ValueError(f"injected failure on rank {rank}")
    return ctx.rank


def die_on(ctx, rank):
    if ctx.rank == rank:
        os.kill(os.getpid(), signal.SIGKILL)
    return ctx.rank


def sleep_on(ctx, rank, seconds):
    if ctx.rank == rank:
        time.sleep(seconds)
    return ctx.rank
