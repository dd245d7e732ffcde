"""launcher: starting and driving worker processes — :func:`launch` for training runs (a
:class:`Run` whose ``step(k)`` returns :class:`~dpbench.launcher.step_stats.StepStats`),
:class:`WorkerPool` for any per-rank function, the CPU pinning plan, the control computation,
the machine facts every run records, and the torchrun cluster runner
(:mod:`~dpbench.launcher.cluster`, whose pools are :class:`RemotePool`).

May import: strategies, workloads, ``dpbench.schema`` and ``dpbench.stats``. Never the measuring
engine, the gate or the report; it never knows which strategy it runs beyond the strategy's
interface. ``dpbench.launch`` (the top-level name) is :func:`dpbench.launcher.launch`.
"""
from dpbench._lazy import lazy_attributes

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

# Loaded on first use (PEP 562): ``python -m dpbench.launcher.cluster`` imports this package first,
# and its start-up check-in (launcher/checkin.py) should not wait for the pools' imports.
_LAZY = {
    "launch": "dpbench.launcher.run",
    "Run": "dpbench.launcher.run",
    "WorkerPool": "dpbench.launcher.pool",
    "WorkerContext": "dpbench.launcher.pool",
    "WorkerError": "dpbench.launcher.pool",
    "WorkerTimeoutError": "dpbench.launcher.pool",
    "available_cores": "dpbench.launcher.pool",
    "default_threads": "dpbench.launcher.pool",
    "RemotePool": "dpbench.launcher.remote",  # dpbench.launcher.cluster's pools
    "make_pool": "dpbench.launcher.remote",
}

__getattr__, __dir__ = lazy_attributes("dpbench.launcher", _LAZY, __all__, globals())
