"""What every pool shares — the local :class:`~dpbench.workers.pool.WorkerPool` and the cluster's
``RemotePool`` (:mod:`dpbench.cluster.remote`): their errors, their start-up and failure timing,
the cores and threads a pool may use, and the process-group backend it picks.
"""

from __future__ import annotations

import os

__all__ = [
    "FAILURE_GRACE_SECONDS",
    "MIN_START_SECONDS",
    "WorkerError",
    "WorkerTimeoutError",
    "available_cores",
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
