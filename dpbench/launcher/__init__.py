"""launcher: starting and driving worker processes — :func:`launch` for training runs (a
:class:`Run` whose ``step(k)`` returns :class:`~dpbench.launcher.step_stats.StepStats`),
:class:`WorkerPool` for any per-rank function, the CPU pinning plan, the control computation,
the machine facts every run records, and the torchrun cluster runner
(:mod:`~dpbench.launcher.cluster`, whose pools are :class:`RemotePool`).

May import: strategies, workloads, ``dpbench.schema`` and ``dpbench.stats``. Never the measuring
engine, the gate or the report; it never knows which strategy it runs beyond the strategy's
interface. ``dpbench.launch`` (the top-level name) is :func:`dpbench.launcher.launch`.
"""
from dpbench.launcher.pool import (
    WorkerContext,
    WorkerError,
    WorkerPool,
    WorkerTimeoutError,
    available_cores,
    default_threads,
)
from dpbench.launcher.remote import RemotePool, make_pool  # dpbench.launcher.cluster
from dpbench.launcher.run import Run, launch

__all__ = [
    "launch",
    "Run",
    "WorkerPool",
    "RemotePool",
    "make_pool",
    "WorkerContext",
    "WorkerError",
    "WorkerTimeoutError",
    "available_cores",
    "default_threads",
]
