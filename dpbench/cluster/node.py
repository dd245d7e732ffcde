"""This process's place in the torchrun world, and what every rank of a cluster session does on its
node: read torchrun's environment, reach its store, describe the node, watch the exit barrier, leave.

Imported before torch by ``python -m dpbench.cluster`` (its check-in must not wait for torch):
torch is imported inside the functions that need it.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

__all__ = [
    "ClusterError",
    "ClusterInfo",
    "DEFAULT_JOIN_TIMEOUT",
    "JOIN_OPTION",
    "JOIN_SKEW_FACTOR",
    "JOIN_SKEW_MIN",
    "USAGE",
    "cluster_world_sizes",
    "first_line",
    "hello_facts",
    "leave_now",
    "node_facts",
    "node_text",
    "open_store",
    "watch_exit_barrier",
]

USAGE = (
    "dpbench.cluster runs under torchrun, on every node: torchrun --nnodes=N --nproc-per-node=P "
    "--rdzv-backend=c10d --rdzv-endpoint=HEAD:29400 --rdzv-id=JOB -m dpbench.cluster [pytest arguments]"
)
# torchrun sets all of these for every rank it starts.
_REQUIRED = (
    "RANK",
    "WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
)
JOIN_OPTION = "--dpbench-join-timeout"
DEFAULT_JOIN_TIMEOUT = 300.0  # every agent imports torch before it says hello: minutes on a loaded node
# Without --dpbench-join-timeout the head waits for the agents JOIN_SKEW_FACTOR × its own start-up
# (torchrun starts every node's workers at once, and each does what the head did: start Python,
# import torch, reach the store), at least JOIN_SKEW_MIN s, at most DEFAULT_JOIN_TIMEOUT: a node
# that died in its first seconds — before its agent could say anything — fails the start in tens
# of seconds, not in five minutes.
JOIN_SKEW_FACTOR = 4.0
JOIN_SKEW_MIN = 30.0
# Environment that says how the backends reach other nodes (recorded per node).
INTERCONNECT_PREFIXES = ("NCCL_", "TORCH_NCCL_", "GLOO_", "TORCH_GLOO_", "FI_", "UCX_")


class ClusterError(RuntimeError):
    """The cluster session could not start or went wrong outside any case (one line)."""


@dataclass(kw_only=True, frozen=True)
class ClusterInfo:
    """This process's place in the torchrun world, read from the environment torchrun set."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int  # torchrun's --nproc-per-node on this node
    node_rank: int  # GROUP_RANK
    nodes: int  # GROUP_WORLD_SIZE
    master_addr: str
    master_port: int
    run_id: str = "none"
    restart_count: int = 0
    use_agent_store: bool = True

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> ClusterInfo:
        missing = [name for name in _REQUIRED if not environ.get(name)]
        if missing:
            raise ClusterError(f"{USAGE} (not under torchrun: {', '.join(missing)} unset)")
        try:
            values = {name: int(environ[name]) for name in _REQUIRED if name != "MASTER_ADDR"}
        except ValueError:
            raise ClusterError(
                f"torchrun's {', '.join(_REQUIRED)} must be integers (MASTER_ADDR aside), "
                f"got {dict((k, environ[k]) for k in _REQUIRED)}"
            ) from None
        return cls(
            rank=values["RANK"],
            world_size=values["WORLD_SIZE"],
            local_rank=values["LOCAL_RANK"],
            local_world_size=values["LOCAL_WORLD_SIZE"],
            node_rank=values["GROUP_RANK"],
            nodes=values["GROUP_WORLD_SIZE"],
            master_addr=environ["MASTER_ADDR"],
            master_port=values["MASTER_PORT"],
            run_id=environ.get("TORCHELASTIC_RUN_ID", "none"),
            restart_count=int(environ.get("TORCHELASTIC_RESTART_COUNT") or 0),
            use_agent_store=environ.get("TORCHELASTIC_USE_AGENT_STORE", "True") == "True",
        )

    @property
    def head_key(self) -> str:
        return f"dpbench/cluster/{self.run_id}/{self.restart_count}/head"


def cluster_world_sizes(local_max: int, info: Any) -> tuple[int, ...]:
    """World sizes a suite sweeps under a cluster: 1…min(local_max, ranks per node) on node 0,
    then every whole number of nodes (ranks per node × 1, 2, … nodes), never past the world."""
    per_node = max(1, info.local_world_size)
    sizes = set(range(1, min(local_max, per_node) + 1))
    sizes |= {per_node * n for n in range(1, info.nodes + 1)}
    return tuple(sorted(s for s in sizes if s <= info.world_size))


def node_facts(info: ClusterInfo) -> dict[str, Any]:
    """What an agent tells the head in its hello (the node's GPUs and versions from local rank 0)."""
    import torch

    facts: dict[str, Any] = {
        "rank": info.rank,
        "local_rank": info.local_rank,
        "pid": os.getpid(),
        "processes": info.local_world_size,
        # Asks the driver for the count; creates no CUDA context in the agent.
        "cuda_device_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(INTERCONNECT_PREFIXES)},
    }
    if info.local_rank == 0:  # one NVML inventory per node is enough
        from dpbench.workers.machine import machine_facts

        facts.update({k: v for k, v in machine_facts().items() if k != "dpbench"})
    return facts


def open_store(info: ClusterInfo, timeout: float) -> Any:
    import torch.distributed as dist

    # torchrun's agent on node 0 hosts the store (TORCHELASTIC_USE_AGENT_STORE=True, the
    # default); with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 rank 0 hosts it, as env:// would.
    host = info.rank == 0 and not info.use_agent_store
    try:
        return dist.TCPStore(
            info.master_addr,
            info.master_port,
            is_master=host,
            multi_tenant=host,
            timeout=timedelta(seconds=timeout),
            wait_for_workers=False,
        )
    except RuntimeError as exc:  # DistNetworkError / DistStoreError
        raise ClusterError(
            f"cannot reach torchrun's store at {info.master_addr}:{info.master_port}: {first_line(exc)}"
        ) from None


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def hello_facts(info: ClusterInfo) -> dict[str, Any]:
    """An agent's hello: its node's facts, which node it is and the host's name."""
    return {**node_facts(info), "node": info.node_rank, "host": socket.gethostname()}


def node_text(info: ClusterInfo) -> str:
    first = info.rank - info.local_rank
    ranks = f"rank {first}" if info.local_world_size == 1 else f"ranks {first}-{first + info.local_world_size - 1}"
    return f"node {info.node_rank}, host {socket.gethostname()}, {ranks}"


def watch_exit_barrier(info: ClusterInfo) -> None:
    """One watch per node (local rank 0's): see :mod:`dpbench.cluster.exit_watch`."""
    from dpbench.cluster import exit_watch

    if info.local_rank == 0:
        try:
            exit_watch.start(node_text(info))
        except OSError as exc:  # no process to start (the grace itself was checked in main())
            print(
                f"dpbench.cluster ({node_text(info)}): not watching torchrun's exit barrier: {exc}",
                file=sys.stderr,
                flush=True,
            )


def leave_now(status: int) -> None:
    """Exit at once, skipping the interpreter's teardown (seconds with torch loaded on a busy
    node): everything this process started is stopped, and its torchrun should learn the
    outcome while the other nodes' fate is still news. (The reaper, on this pipe's EOF, checks.)"""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
