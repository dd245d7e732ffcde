"""What every pool shares — the local :class:`~dpbench.workers.pool.WorkerPool` and the cluster's
``RemotePool`` (:mod:`dpbench.cluster.remote`): the interface the launcher and the measuring code
use (:class:`Pool`), their errors, their start-up and failure timing, the cores and threads a pool
may use, and the process-group backend it picks.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "FAILURE_GRACE_SECONDS",
    "MIN_START_SECONDS",
    "Pool",
    "PoolLayout",
    "WorkerError",
    "WorkerTimeoutError",
    "available_cores",
    "check_collective_timeout",
    "default_threads",
    "pick_backend",
    "require_cuda",
]

# Spawning imports torch in every child; on a busy machine that alone can take many
# seconds, so start-up gets at least this long regardless of the (per-call) ``timeout``.
MIN_START_SECONDS = 60.0
# After the first failure, how long to listen for other ranks' failures so the error
# reports every rank that went wrong, not just the fastest to complain.
FAILURE_GRACE_SECONDS = 0.5


@dataclass(frozen=True, kw_only=True)
class PoolLayout:
    """Where a pool's ranks run: one host, or the nodes of a cluster session."""

    nodes: int
    ranks_per_node: int
    hosts: list[str]


class Pool(Protocol):
    """What the launcher and the measuring code use of a pool: ``world_size`` ranks that each run
    the function a call sends them. The pool provider (:mod:`dpbench.workers.provider`) hands out
    a local ``WorkerPool`` or, under a cluster session, a ``RemotePool``: both are this."""

    @property
    def world_size(self) -> int:
        """Ranks (worker processes) in the pool."""

    @property
    def backend(self) -> str | None:
        """The torch.distributed backend of the ranks' process group (None: no process group)."""

    @property
    def threads_per_worker(self) -> int:
        """``torch.set_num_threads`` of every worker."""

    @property
    def closed(self) -> bool:
        """After ``close()`` or a worker failure: the pool runs nothing more."""

    @property
    def pids(self) -> list[int]:
        """Worker pids on this host: the processes a resource sampler here can watch."""

    @property
    def worker_facts(self) -> list[dict[str, Any]]:
        """Per rank, what the worker reported when it started (JSON-safe)."""

    @property
    def affinity_plan(self) -> dict[str, Any]:
        """The CPU pinning decision (JSON-safe): ``mode``, ``pinned``, ``reason``, ``available_cores``,
        ``rank_cores``, ``parent_cores``, ``parent_note``."""

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> list[Any]:
        """Run ``fn(ctx, *args, **kwargs)`` on every rank; the results by rank. A failure closes the pool."""

    def close(self) -> None:
        """Stop every worker; idempotent."""

    def layout(self, *, world_size: int | None = None) -> PoolLayout:
        """Its nodes, ranks per node and hosts (``world_size``: an in-process strategy's
        replicas, when it runs more than the pool's processes)."""

    def on_head_node(self, rank: int) -> bool:
        """Does rank ``rank`` run on this host (the head's node under a cluster session)?"""

    def host_of(self, rank: int) -> str:
        """The hostname rank ``rank`` runs on."""

    def __enter__(self) -> Pool: ...

    def __exit__(self, *exc_info: Any) -> None: ...


class WorkerError(RuntimeError):
    """A worker rank raised, died or stopped answering.

    ``rank`` is the first failing rank, ``failures`` maps every failing rank to its
    traceback (or a description of how it died).
    """

    def __init__(self, message: str, *, rank: int, failures: dict[int, str]):
        super().__init__(message)
        self.rank = rank
        self.failures = failures

    @property
    def worker_traceback(self) -> str:
        return self.failures.get(self.rank, "")


class WorkerTimeoutError(WorkerError, TimeoutError):
    """No message from one or more ranks within the timeout."""


def check_collective_timeout(value: Any) -> None:
    """A pool's ``collective_timeout``: None (its ``timeout``) or a positive number of seconds."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
        raise ValueError(f"collective_timeout must be None or a positive number of seconds, got {value!r}")


def available_cores() -> int:
    """CPU cores this process may run on (affinity-aware where the OS exposes it)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not every platform has sched_getaffinity
        return max(1, os.cpu_count() or 1)


def default_threads(concurrent_workers: int) -> int:
    """Intra-op threads per worker so that workers × threads ≤ cores (at least 1)."""
    return max(1, available_cores() // max(1, concurrent_workers))


def require_cuda() -> None:
    import torch

    # torch.cuda.is_available() queries the driver without creating a CUDA context, so
    # the parent stays free of CUDA state.
    if not torch.cuda.is_available():
        raise RuntimeError("device='cuda' was requested but torch.cuda.is_available() is False")


def pick_backend(device: str, world_size: int, backend: str | None) -> str:
    if backend is not None:
        if backend not in ("gloo", "nccl"):
            raise ValueError(f"backend must be None, 'gloo' or 'nccl', got {backend!r}")
        if backend == "nccl" and device != "cuda":
            raise ValueError("backend='nccl' needs device='cuda'")
        return backend
    if device == "cuda":
        import torch

        # NCCL cannot run two ranks on one GPU; gloo can.
        return "nccl" if world_size <= torch.cuda.device_count() else "gloo"
    return "gloo"
