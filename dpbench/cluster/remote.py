"""RemotePool: a WorkerPool whose ranks run on the torchrun ranks of a ``dpbench.cluster`` session.

A :class:`dpbench.workers.base.Pool`, as :class:`dpbench.launcher.WorkerPool` is (``run``,
``close``, ``pids``, ``closed``, ``backend``, ``threads_per_worker``, ``world_size``,
``worker_facts``, ``affinity_plan``, ``layout``, ``on_head_node``, ``host_of``) plus ``nodes``,
``ranks_per_node`` and ``hosts``. Rank r of a pool is started by the agent of torchrun rank r
(see :mod:`dpbench.cluster.agent`): a pool of W ranks uses torchrun ranks 0..W-1, so it fills
node 0 first, then node 1, and so on.

Failure handling is WorkerPool's wait (:mod:`dpbench.workers.collect`), with the node named: a
rank that raises or dies → :class:`WorkerError` ("rank 1 (node 1, host b12)"); an agent whose
connection drops (its process was killed, its node went away) → WorkerError too; no word from a
rank for ``timeout`` seconds → :class:`WorkerTimeoutError`. After any of these the pool is closed
and every agent of the pool has stopped its worker.

While a cluster session runs (:func:`heading`), :class:`ClusterPools` is the launcher's pool
provider (:mod:`dpbench.workers.provider`): process-group pools are remote, the rest local.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from multiprocessing.connection import wait
from typing import TYPE_CHECKING, Any

from dpbench.cluster.agent import WorkerOrder
from dpbench.cluster.link import AgentLink
from dpbench.workers.base import (
    MIN_START_SECONDS,
    PoolLayout,
    WorkerError,
    available_cores,
    check_collective_timeout,
    default_threads,
    pick_backend,
)
from dpbench.workers.collect import Heard, Hearing, RankNames, collect_ranks, failure_error
from dpbench.workers.provider import current_provider, providing

if TYPE_CHECKING:
    from dpbench.strategies import CommonOptions

__all__ = ["ClusterPools", "RemotePool", "active_session", "heading"]

# How long close() waits for every agent to confirm its worker is gone (the agent's own
# polite + terminate + kill sequence takes at most ~7 s).
_STOP_WAIT_SECONDS = 12.0


def _session(session: Any) -> Any:
    if session is not None:
        return session
    found = active_session()
    if found is None:
        raise RuntimeError(
            "RemotePool needs a dpbench.cluster session in this process: start the run with "
            "`torchrun ... -m dpbench.cluster [pytest arguments]`"
        )
    return found


class RemotePool:
    """``world_size`` fresh worker processes on torchrun ranks 0..world_size-1 (see the module doc)."""

    def __init__(
        self,
        world_size: int,
        *,
        device: str = "cpu",
        backend: str | None = None,
        timeout: float = 60.0,
        threads_per_worker: int | None = None,
        process_group: bool = True,
        affinity: str = "auto",
        cores_per_worker: int | None = None,
        collective_timeout: float | None = None,
        session: Any = None,
    ):
        session = _session(session)
        if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"world_size must be an int >= 1, got {world_size!r}")
        if world_size > session.world_size:
            raise ValueError(
                f"world_size={world_size} is more ranks than the torchrun world has (WORLD_SIZE={session.world_size})"
            )
        if device not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
        if not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        check_collective_timeout(collective_timeout)
        if threads_per_worker is not None and (
            isinstance(threads_per_worker, bool) or not isinstance(threads_per_worker, int) or threads_per_worker < 1
        ):
            raise ValueError(f"threads_per_worker must be None or an int >= 1, got {threads_per_worker!r}")
        if session.open_pool is not None and not session.open_pool.closed:
            raise RuntimeError("a dpbench.cluster session runs one multi-process pool at a time; close the other first")
        self._session = session
        self._links: list[AgentLink] = [session.links[r] for r in range(world_size)]
        self.world_size = world_size
        self.device = device
        self.timeout = float(timeout)
        self.collective_timeout = None if collective_timeout is None else float(collective_timeout)
        self.affinity = affinity
        counts = self._node_counts()
        self.ranks_per_node = max(counts.values())
        self.nodes = len(counts)
        self.backend = self._backend(backend, counts) if process_group else None
        self.threads_per_worker = threads_per_worker or default_threads(self.ranks_per_node)
        self.pool_id = uuid.uuid4().hex[:12]
        self._cores_per_worker = cores_per_worker
        self._started: dict[int, dict[str, Any]] = {}  # rank → {pid, host, cpus}
        self._facts: list[dict[str, Any]] = []
        self._dead: set[int] = set()  # ranks whose worker died or whose agent went away
        self._closed = False
        self._names = RankNames(
            label=lambda rank: self._links[rank].label,
            group=lambda ranks: ", ".join(self._links[r].label for r in ranks),
            world=f"world_size={world_size} on {self.nodes} node(s)",
            stopped="every rank's worker was stopped",
        )
        session.open_pool = self
        try:
            self._start()
        except BaseException:
            self._shutdown(graceful=False)
            raise

    # -- layout ----------------------------------------------------------------------
    def _node_counts(self) -> dict[int, int]:
        counts: dict[int, int] = {}
        for link in self._links:
            counts[link.node] = counts.get(link.node, 0) + 1
        return counts

    @property
    def hosts(self) -> list[str]:
        """Hostname of each node the pool runs on, in node order."""
        seen: dict[int, str] = {}
        for link in self._links:
            seen.setdefault(link.node, link.host)
        return [seen[node] for node in sorted(seen)]

    def host_of(self, rank: int) -> str:
        """The hostname rank ``rank`` of this pool runs on."""
        return self._links[rank].host

    def on_head_node(self, rank: int) -> bool:
        return self._links[rank].node == self._session.links[0].node

    def _backend(self, backend: str | None, counts: dict[int, int]) -> str:
        if backend is not None or self.device == "cpu":
            return pick_backend(self.device, self.world_size, backend)
        gpus = {link.node: int(link.facts.get("cuda_device_count") or 0) for link in self._links}
        # NCCL cannot run two ranks on one GPU; gloo can (as on one host, node by node).
        return "nccl" if all(counts[node] <= gpus[node] for node in counts) else "gloo"

    def _orders(self) -> list[WorkerOrder]:
        info = self._session.info
        seen: dict[int, int] = {}
        counts = self._node_counts()
        orders = []
        for rank, link in enumerate(self._links):
            index = seen.get(link.node, 0)
            seen[link.node] = index + 1
            orders.append(
                WorkerOrder(
                    pool_id=self.pool_id,
                    rank=rank,
                    world_size=self.world_size,
                    device_type=self.device,
                    backend=self.backend,
                    timeout=self.timeout,
                    collective_timeout=self.collective_timeout,
                    threads=self.threads_per_worker,
                    affinity=self.affinity,
                    cores_per_worker=self._cores_per_worker,
                    local_index=index,
                    local_count=counts[link.node],
                    store_host=info.master_addr,
                    store_port=info.master_port,
                    sys_path=tuple(sys.path),
                )
            )
        return orders

    # -- lifecycle -------------------------------------------------------------------
    def _start(self) -> None:
        lost = {rank: link.lost for rank, link in enumerate(self._links) if not link.alive}
        if lost:  # fail before starting anyone: that rank cannot serve this session again
            self._dead.update(lost)
            raise self._failure_error(lost)
        for link, order in zip(self._links, self._orders()):
            link.send("start", self.pool_id, order)
        self._facts = self._collect("ready", timeout=max(self.timeout, MIN_START_SECONDS))

    def close(self) -> None:
        """Ask every agent to stop its worker (politely) and wait until they did; idempotent."""
        self._shutdown(graceful=True)

    def _shutdown(self, *, graceful: bool) -> None:
        if self._closed:
            return
        self._closed = True
        if self._session.open_pool is self:
            self._session.open_pool = None
        asked = [link for link in self._links if link.send("stop", self.pool_id, graceful)]
        deadline = time.monotonic() + _STOP_WAIT_SECONDS
        waiting = {link.conn: link for link in asked}
        while waiting and time.monotonic() < deadline:
            for conn in wait(list(waiting), timeout=max(0.0, deadline - time.monotonic())):
                message = self._receive(waiting[conn])
                if message is None or (message[0] == "stopped" and message[1] == self.pool_id):
                    waiting.pop(conn)

    def __enter__(self) -> RemotePool:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def pids(self) -> list[int]:
        """Worker pids on this (the head's) node: the ones a resource sampler here can watch."""
        return [started["pid"] for rank, started in sorted(self._started.items()) if self.on_head_node(rank)]

    def layout(self, *, world_size: int | None = None) -> PoolLayout:
        """The nodes this pool's ranks run on (``world_size`` is a local pool's concern: ignored)."""
        return PoolLayout(nodes=self.nodes, ranks_per_node=self.ranks_per_node, hosts=list(self.hosts))

    @property
    def worker_facts(self) -> list[dict[str, Any]]:
        """Per rank, what the worker reported at start (as WorkerPool's) plus ``node`` and ``host``."""
        return [
            dict(f, env=dict(f["env"]), runtime_env=dict(f.get("runtime_env") or {}), node=link.node, host=link.host)
            for f, link in zip(self._facts, self._links)
        ]

    @property
    def affinity_plan(self) -> dict[str, Any]:
        """WorkerPool's keys; each agent plans its node's ranks (``rank_cores``: what each got)."""
        started = [self._started.get(r, {}) for r in range(self.world_size)]
        cores = [s.get("cpus") for s in started]
        modes = {s.get("affinity_mode") for s in started} - {None}
        reasons = sorted(
            {
                f"node {link.node}: {s['affinity_reason']}"
                for s, link in zip(started, self._links)
                if s.get("affinity_reason")
            }
        )
        return {
            "mode": modes.pop() if len(modes) == 1 else self.affinity,
            "pinned": all(c is not None for c in cores),
            "reason": "each node plans its own ranks' cores — " + "; ".join(reasons),
            "available_cores": sorted(os.sched_getaffinity(0))
            if hasattr(os, "sched_getaffinity")
            else list(range(available_cores())),
            "rank_cores": cores,
            "parent_cores": None,
            "parent_note": "a cluster pool leaves the head process where it is",
        }

    # -- calls -----------------------------------------------------------------------
    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> list[Any]:
        """Run ``fn(ctx, *args, **kwargs)`` on every rank; return the results by rank."""
        if self._closed:
            raise RuntimeError("this RemotePool is closed (after close() or a worker failure); start a new one")
        try:
            payload = pickle.dumps(("call", fn, args, kwargs))
        except Exception as exc:
            raise TypeError(
                f"fn and its arguments must be picklable to reach the workers "
                f"({type(exc).__name__}: {exc}); use module-level functions"
            ) from exc
        try:
            for link in self._links:
                link.send("to", self.pool_id, payload)  # a lost agent is reported by _collect
            return self._collect("result", timeout=self.timeout)
        except BaseException:
            # Includes KeyboardInterrupt: no worker may outlive a failed call on any node.
            self._shutdown(graceful=False)
            raise

    def _receive(self, link: AgentLink) -> tuple | None:
        """One message from ``link``'s agent; None once the connection is gone."""
        try:
            return pickle.loads(link.conn.recv_bytes())
        except (EOFError, OSError) as exc:
            link.mark_lost(
                f"its dpbench.cluster agent (pid {link.pid}) went away "
                f"({type(exc).__name__}: the process was killed or its node is unreachable)"
            )
            return None

    def _hear(self, rank: int, kind: str) -> Heard:
        """What rank's agent says: its worker's answer, a sign of life, a failure, or nothing of this pool's."""
        link = self._links[rank]
        message = self._receive(link)
        if message is None:
            self._dead.add(rank)
            return Heard(hearing=Hearing.FAILED, value=link.lost)
        tag, pool_id, payload = message
        if pool_id != self.pool_id:
            return Heard(hearing=Hearing.OTHER)  # a late word from an earlier pool of this session
        if tag == "started":
            self._started[rank] = payload
            return Heard(hearing=Hearing.ALIVE)
        if tag in ("failed", "died"):
            if tag == "died":
                self._dead.add(rank)
            return Heard(hearing=Hearing.FAILED, value=payload)
        if tag == "from":
            worker_tag, value = pickle.loads(payload)
            if worker_tag == kind:
                return Heard(hearing=Hearing.DONE, value=value)
            if worker_tag == "error":
                return Heard(hearing=Hearing.FAILED, value=value)
            return Heard(hearing=Hearing.ALIVE)
        return Heard(hearing=Hearing.OTHER)

    def _collect(self, kind: str, *, timeout: float) -> list[Any]:
        """Wait until every rank sent ``kind``; raise on errors, deaths, lost agents and silence."""
        return collect_ranks(
            world_size=self.world_size,
            timeout=timeout,
            waitables={link.conn: rank for rank, link in enumerate(self._links) if link.alive},
            hear=lambda _conn, rank: self._hear(rank, kind),
            names=self._names,
            fail=self._failure_error,
            failed={r: link.lost for r, link in enumerate(self._links) if not link.alive},
        )

    def _failure_error(self, failures: dict[int, str]) -> WorkerError:
        # Ranks that died or lost their agent first: their peers' collective errors follow from them.
        order = sorted(failures, key=lambda r: (r not in self._dead, r))
        return failure_error(failures, names=self._names, order=order, first=order[0])


# ---------------------------------------------------------------- the launcher's pools under a session
class ClusterPools:
    """The pool provider a cluster session installs (:mod:`dpbench.workers.provider`): process-group
    pools span the torchrun ranks, each strategy's placement spread over the nodes."""

    def __init__(self, session: Any):
        self.session = session

    def make_pool(self, world_size: int, **kwargs: Any) -> RemotePool:
        return RemotePool(world_size, session=self.session, **kwargs)

    def placement_for(self, strategy_cls: Any, *, world_size: int, device: str, options: CommonOptions) -> Any:
        """The strategy's own rule applied to the busiest node's ranks (its GPU count decides nccl
        or gloo); the devices are each rank's on its own node."""
        from dpbench.strategies.base import StrategyUnavailable

        session = self.session

        try:
            placement = strategy_cls.placement(world_size=world_size, device=device, options=options)
        except StrategyUnavailable:  # e.g. more ranks than one node's GPUs: judged per node below
            placement = None
        if placement is not None and placement.backend is None:
            return placement  # in-process strategies run on the head's node, as on one host
        if world_size > session.world_size:
            raise ValueError(
                f"world_size={world_size} is more ranks than the torchrun world has (WORLD_SIZE={session.world_size})"
            )
        links = [session.links[r] for r in range(world_size)]
        counts: dict[int, int] = {}
        for link in links:
            counts[link.node] = counts.get(link.node, 0) + 1
        per_node = strategy_cls.placement(world_size=max(counts.values()), device=device, options=options)
        if device == "cuda":
            # As the worker picks it (workers/worker.py): rank % that node's GPU count.
            devices = tuple(
                f"cuda:{r % max(1, int(link.facts.get('cuda_device_count') or 1))}" for r, link in enumerate(links)
            )
        else:
            devices = ("cpu",) * world_size
        return replace(per_node, processes=world_size, devices=devices, concurrent_replicas=max(counts.values()))


def active_session() -> Any:
    """The cluster session this process heads (None outside ``python -m dpbench.cluster`` on rank 0)."""
    provider = current_provider()
    return provider.session if isinstance(provider, ClusterPools) else None


@contextlib.contextmanager
def heading(session: Any) -> Iterator[None]:
    """Make ``session`` the active one for the duration of the block: the launcher's process-group
    pools run on its torchrun ranks."""
    with providing(ClusterPools(session)):
        yield
