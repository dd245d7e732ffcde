"""Module-level functions and workloads for the launcher tests (picklable by reference)."""

from __future__ import annotations

import functools
import os
import signal
import time

import psutil
import torch
import torch.nn.functional as F
from torch import nn

from dpbench.workloads.base import Workload

HANG_SECONDS = 600


def describe(ctx):
    import torch.distributed as dist

    total = torch.tensor([float(ctx.rank + 1)])
    dist.all_reduce(total, group=ctx.group)
    return {
        "rank": ctx.rank,
        "world_size": ctx.world_size,
        "backend": ctx.backend,
        "device": str(ctx.device),
        "dist_rank": dist.get_rank(),
        "threads": torch.get_num_threads(),
        "sum": total.item(),
        "pid": os.getpid(),
    }


def remember(ctx, value):
    ctx.state["value"] = value * (ctx.rank + 1)


def recall(ctx):
    return ctx.state["value"]


def fail_on(ctx, rank):
    if ctx.rank == rank:
        raise ValueError(f"injected failure on rank {rank}")
    return ctx.rank


def sleep_on(ctx, rank, seconds=HANG_SECONDS):
    if ctx.rank == rank:
        time.sleep(seconds)
    return ctx.rank


def die_on(ctx, rank):
    if ctx.rank == rank:
        os.kill(os.getpid(), signal.SIGKILL)
    return ctx.rank


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_initialized() else 0


class Faulty(nn.Module):
    """A small MLP whose forward misbehaves on one rank: "raise" or "hang"."""

    def __init__(self, fault: str, rank: int):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 3))
        self.fault, self.bad_rank = fault, rank

    def forward(self, x):
        if _rank() == self.bad_rank:
            if self.fault == "raise":
                raise ValueError(f"injected failure in forward on rank {self.bad_rank}")
            if self.fault == "hang":
                time.sleep(HANG_SECONDS)
        if self.fault == "slow":
            time.sleep(0.3)
        return self.body(x)


def faulty_model(fault: str, rank: int) -> nn.Module:
    return Faulty(fault, rank)


def batch(step: int, global_batch: int, seed: int):
    gen = torch.Generator().manual_seed(seed * 7919 + step)
    return torch.randn(global_batch, 8, generator=gen), torch.randint(0, 3, (global_batch,), generator=gen)


def loss(output, target):
    return F.cross_entropy(output, target)


def faulty_workload(fault: str, rank: int) -> Workload:
    return Workload(
        model=functools.partial(faulty_model, fault, rank), batch=batch, loss=loss, name=f"faulty-{fault}-rank{rank}"
    )


HEALTHY = faulty_workload("none", -1)


def assert_gone(pids: list[int]) -> None:
    """Every worker pid has exited (and was reaped: no zombie left either)."""
    for pid in pids:
        assert not psutil.pid_exists(pid), f"worker pid {pid} is still alive"


def stray_children() -> list[psutil.Process]:
    """Children of this process other than Python's forkserver helper and the launcher's reaper
    (workers/lifeline.py), which live until it exits."""
    out = []
    for child in psutil.Process().children(recursive=True):
        try:
            cmdline = " ".join(child.cmdline())
            if "multiprocessing.forkserver" in cmdline or "lifeline.py" in cmdline:
                continue
            out.append(child)
        except psutil.NoSuchProcess:
            pass
    return out


def listening_ports() -> set:
    return {c.laddr for c in psutil.Process().net_connections(kind="inet") if c.status == psutil.CONN_LISTEN}


def unpicklable_result(ctx):
    return lambda: ctx.rank  # a lambda cannot be pickled back to the parent


def helper_pid(ctx) -> int:
    """The worker's OS parent: under forkserver, the helper it was forked from."""
    return os.getppid()


TOUCH_BYTES = 64 * 2**20  # above glibc's largest mmap threshold (32 MiB): mapped and unmapped each step


class Toucher(nn.Module):
    """A tiny linear layer whose forward also fills a fresh 64 MiB buffer: glibc maps it, torch
    writes every page, and freeing it unmaps it, so each step costs >= 64 MiB / 4 KiB minor faults."""

    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 3)

    def forward(self, x):
        scratch = torch.ones(TOUCH_BYTES // 4)
        return self.body(x) + 0.0 * scratch[0]


TOUCHING = Workload(model=Toucher, batch=batch, loss=loss, name="touching")
