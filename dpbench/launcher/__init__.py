"""Starting and driving worker processes: :func:`launch` for training runs, :class:`WorkerPool` for any per-rank function.

``dpbench.launch`` (the top-level name) is :func:`dpbench.launcher.launch`; the module is
called ``launcher`` so that the attribute ``dpbench.launch`` can be the function.
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
