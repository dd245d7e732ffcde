"""launcher: the API a script or a suite calls — :func:`launch` starts a strategy training a
workload in worker processes and returns a :class:`Run` whose ``step(k)`` gives
:class:`~dpbench.launcher.step_stats.StepStats` and whose ``info`` is a :class:`RunInfo`; plus the
control computation and the opt-in traces. It picks its pool through the workers' seam
(:func:`dpbench.workers.provider.make_pool`), never by importing the cluster runner.

May import: workers, strategies, workloads, ``dpbench.schema`` and ``dpbench.stats``. Never the
cluster runner, the measuring engine, the gate or the report; it never knows which strategy it
runs beyond the strategy's interface. ``dpbench.launch`` (the top-level name) is
:func:`dpbench.launcher.launch`.
"""

from dpbench._lazy import lazy_attributes

__all__ = [
    "launch",
    "Run",
    "RunInfo",
    "WorkerPool",
    "make_pool",
    "WorkerContext",
    "WorkerError",
    "WorkerTimeoutError",
    "available_cores",
    "default_threads",
]

# Loaded on first use (PEP 562): importing the package costs nothing until a name is used. The
# pool names are the workers' (dpbench.workers), re-exported here for the launcher's callers.
_LAZY = {
    "launch": "dpbench.launcher.run",
    "Run": "dpbench.launcher.run",
    "RunInfo": "dpbench.launcher.run_info",
    "WorkerPool": "dpbench.workers.pool",
    "WorkerContext": "dpbench.workers.worker",
    "WorkerError": "dpbench.workers.base",
    "WorkerTimeoutError": "dpbench.workers.base",
    "available_cores": "dpbench.workers.base",
    "default_threads": "dpbench.workers.base",
    "make_pool": "dpbench.workers.provider",
}

__getattr__, __dir__ = lazy_attributes("dpbench.launcher", _LAZY, __all__, globals())
