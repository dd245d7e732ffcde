"""workers: processes on one host — :class:`WorkerPool` (spawned workers with torch.distributed
set up, driven from the parent), the :class:`Pool` interface every pool offers and the wait for
every rank's answer they share (:mod:`~dpbench.workers.collect`), the worker side, the forkserver
helper, the lifeline that leaves nothing behind, the CPU pinning plan, the user's runtime
environment passed through, the machine facts every run records, and the seam that lets another
pool provider take over (:mod:`~dpbench.workers.provider`).

May import: ``dpbench.schema``, ``dpbench.stats`` and ``dpbench.sampler.gpus`` (NVML's view of the
GPUs, for the CPUs near each rank's GPU in the pinning plan). Never strategies (a worker runs whatever
picklable function it is sent; the provider seam names their options type for type checkers
only), the launcher, the cluster runner or anything above.
"""

from dpbench._lazy import lazy_attributes

__all__ = [
    "Pool",
    "WorkerPool",
    "WorkerContext",
    "WorkerError",
    "WorkerTimeoutError",
    "available_cores",
    "default_threads",
    "make_pool",
    "machine_facts",
]

# Loaded on first use (PEP 562): the cluster runner imports this package before torch.
_LAZY = {
    "Pool": "dpbench.workers.base",
    "WorkerPool": "dpbench.workers.pool",
    "WorkerContext": "dpbench.workers.worker",
    "WorkerError": "dpbench.workers.base",
    "WorkerTimeoutError": "dpbench.workers.base",
    "available_cores": "dpbench.workers.base",
    "default_threads": "dpbench.workers.base",
    "make_pool": "dpbench.workers.provider",
    "machine_facts": "dpbench.workers.machine",
}

__getattr__, __dir__ = lazy_attributes("dpbench.workers", _LAZY, __all__, globals())
