"""Communication microbenchmark: all_reduce and broadcast over a process group.

Runs on every rank of a :class:`dpbench.launcher.WorkerPool`. Bandwidths follow the
nccl-tests definitions (https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md):
``algbw = size / time``; all_reduce ``busbw = algbw * 2 (n-1) / n``; broadcast ``busbw = algbw``.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

__all__ = [
    "COLLECTIVES",
    "CollectiveResult",
    "bus_bandwidth_factor",
    "collective_worker",
    "ddp_bucket_sizes",
    "default_sizes",
    "summarize",
]

COLLECTIVES = ("all_reduce", "broadcast")


def bus_bandwidth_factor(collective: str, world_size: int) -> float:
    """nccl-tests' factor from algorithm bandwidth to bus bandwidth."""
    if collective == "all_reduce":
        return 2.0 * (world_size - 1) / world_size
    if collective == "broadcast":
        return 1.0
    raise ValueError(f"collective must be one of {COLLECTIVES}, got {collective!r}")


def default_sizes(max_bytes: int = 256 << 20, min_bytes: int = 4 << 10, factor: int = 4) -> list[int]:
    """Message sizes from ``min_bytes`` to ``max_bytes`` in steps of ``factor`` (4 KiB … 256 MiB)."""
    if min_bytes <= 0 or max_bytes < min_bytes or factor < 2:
        raise ValueError(f"need 0 < min_bytes <= max_bytes and factor >= 2, got {min_bytes=}, {max_bytes=}, {factor=}")
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    return sizes


def ddp_bucket_sizes(module: Any, *, bucket_cap_mb: float = 25.0, first_bucket_mb: float = 1.0) -> list[int]:
    """Byte sizes of the gradient buckets DDP's default policy would build for ``module``.

    DDP fills buckets with parameters in reverse registration order (roughly the order their
    gradients become ready), caps the first bucket at ~1 MiB so communication starts early,
    and the rest at ``bucket_cap_mb``. This is that greedy policy on parameter byte sizes; it
    ignores dtype splits and is meant to size the microbenchmark, not to predict DDP exactly.
    """
    sizes: list[int] = []
    cap, current = first_bucket_mb * 2**20, 0
    for param in reversed([p for p in module.parameters() if p.requires_grad]):
        nbytes = param.numel() * param.element_size()
        if current and current + nbytes > cap:
            sizes.append(current)
            cap, current = bucket_cap_mb * 2**20, 0
        current += nbytes
    if current:
        sizes.append(current)
    return sizes


@dataclass(frozen=True)
class CollectiveResult:
    collective: str
    size_bytes: int
    world_size: int
    times: list[float]  # seconds per call, max over ranks

    @property
    def time_s(self) -> float:
        return statistics.median(self.times)

    @property
    def algbw_gbps(self) -> float:
        return self.size_bytes / self.time_s / 1e9

    @property
    def busbw_gbps(self) -> float:
        return self.algbw_gbps * bus_bandwidth_factor(self.collective, self.world_size)


def collective_worker(ctx: Any, collective: str, size_bytes: int, iters: int, warmup: int = 2) -> list[float]:
    """Time ``iters`` calls of ``collective`` on this rank; returns seconds per call.

    Each call starts after a barrier so every rank measures the same collective, and the
    clock stops after a device synchronisation so it measures the transfer, not its launch.
    """
    import torch
    import torch.distributed as dist

    if collective not in COLLECTIVES:
        raise ValueError(f"collective must be one of {COLLECTIVES}, got {collective!r}")
    if size_bytes < 4 or size_bytes % 4:
        raise ValueError(f"size_bytes must be a positive multiple of 4 (float32), got {size_bytes}")
    tensor = torch.ones(size_bytes // 4, dtype=torch.float32, device=ctx.device)

    def sync() -> None:
        if tensor.is_cuda:
            torch.cuda.synchronize(tensor.device)

    def call() -> None:
        if collective == "all_reduce":
            dist.all_reduce(tensor, group=ctx.group)
        else:
            dist.broadcast(tensor, src=0, group=ctx.group)

    for _ in range(warmup):
        call()
    sync()
    times = []
    for _ in range(iters):
        dist.barrier(group=ctx.group)  # line the ranks up so one rank's lateness is not counted as transfer time
        start = time.perf_counter()
        call()
        sync()  # the collective is asynchronous on CUDA: wait for it before reading the clock
        times.append(time.perf_counter() - start)
    return times


def summarize(collective: str, size_bytes: int, per_rank_times: list[list[float]]) -> CollectiveResult:
    """Combine per-rank timings: each call is as slow as its slowest rank."""
    if not per_rank_times or any(len(t) != len(per_rank_times[0]) for t in per_rank_times):
        raise ValueError("per_rank_times must hold one equally long list of timings per rank")
    slowest = [max(call) for call in zip(*per_rank_times)]
    return CollectiveResult(collective, size_bytes, len(per_rank_times), slowest)
