"""RunInfo: what a started :class:`~dpbench.launcher.run.Run` is — ``Run.info``.

The resolved configuration (strategy options with their defaults, per-replica batches, threads,
seed), where its ranks run (devices, nodes, hosts, cores) and what each worker reported when it
started. Readers use the attributes; :meth:`RunInfo.as_dict` is the same data as the JSON-safe
dict a result or a script writes out.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

__all__ = ["RunInfo"]


@dataclass(kw_only=True, frozen=True)
class RunInfo:
    """What a started run trains, with what, and where (``Run.info``)."""

    strategy: str
    """The strategy's registered name (``"ddp"``, ``"fsdp"``, …)."""
    options: dict[str, Any]
    """The strategy's options as resolved: the ones asked for plus every default, in the strategy's order."""
    workload: str
    """The workload's name."""
    workload_params: dict[str, Any]
    """The workload's own parameters (``Workload.params``; ``spec`` is the spec it was named by), ``{}`` if none."""
    world_size: int
    """Replicas (ranks) training the model."""
    device_type: str
    """``"cpu"`` or ``"cuda"``."""
    backend: str | None
    """The process group's backend (``"gloo"``, ``"nccl"``); None for a strategy that runs in one process."""
    global_batch: int
    """Samples per step, all replicas together."""
    per_replica_batch: list[int]
    """Samples per step of each replica (the strategy's split of ``global_batch``)."""
    threads_per_worker: int
    """``torch.set_num_threads`` in every worker process."""
    seed: int
    """Seed of the initial weights and of the batch sequence."""
    lr: float
    """The SGD learning rate."""
    devices: list[str]
    """Device label of each rank on this host, the ones a sampler here can watch (under a cluster
    session, the ranks on other nodes are left out)."""
    processes: int
    """Worker processes started (one per rank, or one holding every replica)."""
    timeout: float
    """Seconds a rank may stay silent before the run fails."""
    workers: list[dict[str, Any]]
    """Per rank, what its worker reported at start: affinity, threads, cudnn, NCCL/GLOO settings
    (keys: :func:`dpbench.workers.worker.worker_facts`; under a cluster session also ``node``, ``host``)."""
    affinity: dict[str, Any] | None
    """The pool's core plan (``pinned``, ``rank_cores``, ``parent_cores``, …); None when the pool has none."""
    nodes: int
    """Nodes the ranks run on (1 on one host)."""
    ranks_per_node: int
    """Ranks on each node (``world_size`` on one host)."""
    hosts: list[str]
    """Host name of each node."""

    def as_dict(self) -> dict[str, Any]:
        """Every field, in declaration order, as a JSON-safe dict (copies: changing it leaves the run's alone)."""
        return dataclasses.asdict(self)
