"""``python -m dpbench.launcher.cluster [pytest arguments]``: the suites across several nodes, under torchrun.

On every node: ``torchrun --nnodes=2 --nproc-per-node=8 --rdzv-backend=c10d
--rdzv-endpoint=HEAD:29400 --rdzv-id=JOB -m dpbench.launcher.cluster suites/ --benchmark-save=NAME``.

What runs where. Global rank 0 is the *head*: it runs the one pytest session (collection,
trials, saving, all on rank 0's node). Every torchrun rank — rank 0 included, through a
thread of the head — is an *agent* (:mod:`dpbench.launcher.agent`): when a case needs W
ranks, the head's :class:`dpbench.launcher.remote.RemotePool` asks agents 0..W-1 (filling
nodes in order) to start one fresh local worker each; the workers form the case's process
group through a fresh prefix of torchrun's own TCPStore. In-process strategies (single, dp,
manual, torch-dp) run in local workers on the head's node, as on one host.

How the agents find the head: the head listens on a free TCP port and publishes its address
and a random authentication key in torchrun's store (``MASTER_ADDR``/``MASTER_PORT``, which
torchrun points at node 0, where rank 0 runs); each agent connects and says hello with its
node's facts (hostname, GPUs, NCCL_*/GLOO_* settings) — ``machine_info["cluster"]``.

Start-up (:mod:`dpbench.launcher.checkin`): before either imports torch, every agent checks in
with the head on a port both derive from the rendezvous, so a node that dies while its dpbench
still starts (before it could say hello) fails the start within seconds, not at the join deadline.

Liveness (:mod:`dpbench.launcher.liveness`): every agent also keeps a heartbeat connection to
the head. A node that dies, hangs or loses the network is noticed within
``LOST_AFTER_SECONDS`` (6 s) wherever the run is; the head then interrupts its pytest session
(nothing half-measured is saved) and exits 1 with one line naming the node, its host and its
ranks; an agent whose head is lost stops its workers and exits 1 the same way. A node lost
while the session ends (before its goodbye) also makes the head exit 1: torchrun waits in its
exit barrier (300 s) for every node only when its own worker succeeded, so a head exiting 0
next to a dead node would keep node 0's torchrun waiting for it.

Exit status: the head exits with pytest's status and tells every agent to exit with it too,
so a failed session makes every torchrun agent exit non-zero; an agent whose head goes away
exits 1. A node lost *after* its goodbye (the session ended cleanly, its torchrun not yet in the
exit barrier) is noticed by :mod:`dpbench.launcher.exit_watch`, left behind by each node's local
rank 0: it stops its node's torchrun when the barrier still waits 6 s after the session ended, so
no node waits the barrier's 300 s for a dead one. Outside torchrun: one line saying how to start it, status 2.
"""
from __future__ import annotations

import json
import os
import pickle
import queue
import secrets
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from multiprocessing.connection import Client, Listener
from typing import Any, Mapping

from dpbench.launcher import checkin as _checkin
from dpbench.launcher.liveness import WATCH_TAG

__all__ = ["ClusterInfo", "ClusterError", "HeadSession", "USAGE", "active_session", "cluster_facts",
           "cluster_world_sizes", "main"]

USAGE = ("dpbench.launcher.cluster runs under torchrun, on every node: torchrun --nnodes=N --nproc-per-node=P "
         "--rdzv-backend=c10d --rdzv-endpoint=HEAD:29400 --rdzv-id=JOB -m dpbench.launcher.cluster [pytest arguments]")
# torchrun sets all of these for every rank it starts.
_REQUIRED = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
             "GROUP_RANK", "GROUP_WORLD_SIZE")
_JOIN_OPTION = "--dpbench-join-timeout"
DEFAULT_JOIN_TIMEOUT = 300.0  # every agent imports torch before it says hello: minutes on a loaded node
# Without --dpbench-join-timeout the head waits for the agents JOIN_SKEW_FACTOR × its own start-up
# (torchrun starts every node's workers at once, and each does what the head did: start Python,
# import torch, reach the store), at least JOIN_SKEW_MIN s, at most DEFAULT_JOIN_TIMEOUT: a node
# that died in its first seconds — before its agent could say anything — fails the start in tens
# of seconds, not in five minutes.
JOIN_SKEW_FACTOR = 4.0
JOIN_SKEW_MIN = 30.0
_BYE_SECONDS = 20.0
# Environment that says how the backends reach other nodes (recorded per node).
_INTERCONNECT_PREFIXES = ("NCCL_", "TORCH_NCCL_", "GLOO_", "TORCH_GLOO_", "FI_", "UCX_")


def active_session() -> Any:
    """The cluster session this process heads, if any (:func:`dpbench.launcher.remote.active_session`)."""
    from dpbench.launcher.remote import active_session as _active

    return _active()


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
    def from_environ(cls, environ: Mapping[str, str]) -> "ClusterInfo":
        missing = [name for name in _REQUIRED if not environ.get(name)]
        if missing:
            raise ClusterError(f"{USAGE} (not under torchrun: {', '.join(missing)} unset)")
        try:
            values = {name: int(environ[name]) for name in _REQUIRED if name != "MASTER_ADDR"}
        except ValueError:
            raise ClusterError(f"torchrun's {', '.join(_REQUIRED)} must be integers (MASTER_ADDR aside), "
                               f"got {dict((k, environ[k]) for k in _REQUIRED)}") from None
        return cls(rank=values["RANK"], world_size=values["WORLD_SIZE"], local_rank=values["LOCAL_RANK"],
                   local_world_size=values["LOCAL_WORLD_SIZE"], node_rank=values["GROUP_RANK"],
                   nodes=values["GROUP_WORLD_SIZE"], master_addr=environ["MASTER_ADDR"],
                   master_port=values["MASTER_PORT"], run_id=environ.get("TORCHELASTIC_RUN_ID", "none"),
                   restart_count=int(environ.get("TORCHELASTIC_RESTART_COUNT") or 0),
                   use_agent_store=environ.get("TORCHELASTIC_USE_AGENT_STORE", "True") == "True")

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


# ---------------------------------------------------------------- the session on the head
@dataclass(kw_only=True)
class HeadSession:
    """The head's view of the torchrun world: one :class:`AgentLink` per rank (rank 0 included)."""

    info: ClusterInfo
    links: dict[int, Any]
    open_pool: Any = None
    local_agent: threading.Thread | None = field(default=None, repr=False)
    watch: Any = field(default=None, repr=False)  # dpbench.launcher.liveness.HeadWatch
    lost: list[str] = field(default_factory=list)  # one line per lost node
    in_pytest: bool = False

    def on_lost(self, line: str) -> None:
        """Called by the liveness thread: stop the session wherever it is (as Ctrl-C does)."""
        self.lost.append(line)
        print(f"dpbench.launcher.cluster: {line}; stopping the run", file=sys.stderr, flush=True)
        if self.in_pytest:
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    @property
    def world_size(self) -> int:
        return self.info.world_size

    def summary(self) -> str:
        nodes: dict[int, list[int]] = {}
        for rank, link in sorted(self.links.items()):
            nodes.setdefault(link.node, []).append(rank)
        where = "; ".join(f"node {n} ({self.links[r[0]].host}): " + (f"rank {r[0]}" if len(r) == 1 else f"ranks {r[0]}-{r[-1]}")
                          for n, r in sorted(nodes.items()))
        return (f"dpbench.launcher.cluster: {len(nodes)} node(s), world {self.world_size} — {where}. A case with n ranks "
                f"runs on ranks 0..n-1 (node 0 first); in-process strategies run on node 0.")

    def close(self, status: int) -> list[int]:
        """Tell every agent to stop its workers and exit with ``status``; wait for their goodbyes.

        → the ranks that never said goodbye (their node was lost before or while it ended)."""
        from dpbench.launcher.agent import wait_for_bye

        if self.open_pool is not None:
            self.open_pool.close()
        if self.watch is not None:
            self.watch.leaving.update(self.links)
        told = [link for link in self.links.values() if link.send("exit", None, status)]
        deadline = time.monotonic() + _BYE_SECONDS
        missing = [link.rank for link in self.links.values() if link not in told]
        for link in told:
            if not wait_for_bye(link.conn, deadline, alive=lambda link=link: link.alive):
                missing.append(link.rank)
        if self.watch is not None:
            self.watch.stop()
        for link in self.links.values():
            link.conn.close()
        if self.local_agent is not None:
            self.local_agent.join(5.0)
        return sorted(missing)


def cluster_facts(session: HeadSession | None = None) -> dict[str, Any] | None:
    """``machine_info["cluster"]``: nodes, processes per node, and each node's facts (None: no cluster)."""
    session = session or active_session()
    if session is None:
        return None
    per_node: dict[int, dict[str, Any]] = {}
    for rank, link in sorted(session.links.items()):
        entry = per_node.setdefault(link.node, {"node": link.node, "hostname": link.host, "ranks": []})
        entry["ranks"].append(rank)
        if "gpus" not in entry and link.facts.get("gpus") is not None:
            entry.update({k: v for k, v in link.facts.items()
                          if k not in ("rank", "local_rank", "pid", "node", "host", "ranks")})
    nodes = [per_node[n] for n in sorted(per_node)]
    counts = [len(n["ranks"]) for n in nodes]
    info = session.info
    return {
        "launcher": "torchrun", "rendezvous_id": info.run_id, "restart_count": info.restart_count,
        "nodes": len(nodes), "world_size": info.world_size,
        "processes_per_node": counts[0] if len(set(counts)) == 1 else counts,
        "rank_order": "a case with n ranks runs on torchrun ranks 0..n-1, filling nodes in order",
        "per_node": nodes,
    }


def node_facts(info: ClusterInfo) -> dict[str, Any]:
    """What an agent tells the head in its hello (the node's GPUs and versions from local rank 0)."""
    import torch

    facts: dict[str, Any] = {
        "rank": info.rank, "local_rank": info.local_rank, "pid": os.getpid(),
        "processes": info.local_world_size,
        # Asks the driver for the count; creates no CUDA context in the agent.
        "cuda_device_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(_INTERCONNECT_PREFIXES)},
    }
    if info.local_rank == 0:  # one NVML inventory per node is enough
        from dpbench.launcher.machine import machine_facts

        facts.update({k: v for k, v in machine_facts().items() if k != "dpbench"})
    return facts


def _store(info: ClusterInfo, timeout: float) -> Any:
    import torch.distributed as dist

    # torchrun's agent on node 0 hosts the store (TORCHELASTIC_USE_AGENT_STORE=True, the
    # default); with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 rank 0 hosts it, as env:// would.
    host = info.rank == 0 and not info.use_agent_store
    try:
        return dist.TCPStore(info.master_addr, info.master_port, is_master=host, multi_tenant=host,
                             timeout=timedelta(seconds=timeout), wait_for_workers=False)
    except RuntimeError as exc:  # DistNetworkError / DistStoreError
        raise ClusterError(f"cannot reach torchrun's store at {info.master_addr}:{info.master_port}: "
                           f"{_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class _Acceptor(threading.Thread):
    """Accepts the agents' connections until told to stop (``Listener.accept`` has no timeout)."""

    def __init__(self, listener: Listener, authkey: bytes):
        super().__init__(name="dpbench-cluster-accept", daemon=True)
        self.listener, self.authkey = listener, authkey
        self.accepted: queue.Queue = queue.Queue()
        self.stopping = False

    def run(self) -> None:
        while not self.stopping:
            try:
                conn = self.listener.accept()
            except Exception:  # a stranger without the key, a reset: keep listening
                continue
            if self.stopping:
                conn.close()
                break
            self.accepted.put(conn)

    def stop(self) -> None:
        self.stopping = True
        try:  # wake the blocked accept() with a connection of our own
            Client(("127.0.0.1", self.listener.address[1]), authkey=self.authkey).close()
        except OSError:
            pass
        self.join(5.0)
        self.listener.close()


def _join_agents(info: ClusterInfo, store: Any, timeout: float,
                 checkin: _checkin.CheckinServer | None = None) -> tuple[dict[int, Any], dict[int, Any]]:
    from dpbench.launcher.remote import AgentLink

    authkey = secrets.token_bytes(32)
    listener = Listener(("0.0.0.0", 0), authkey=authkey)
    host = os.environ.get("DPBENCH_HEAD_ADDR") or info.master_addr  # node 0's address, as torchrun set it
    acceptor = _Acceptor(listener, authkey)
    acceptor.start()
    store.set(info.head_key, json.dumps({"host": host, "port": listener.address[1], "authkey": authkey.hex()}))
    links: dict[int, AgentLink] = {}
    watches: dict[int, Any] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(links) < info.world_size - 1 or len(watches) < info.world_size - 1:
            _check_joined(links, watches, checkin)
            try:
                conn = acceptor.accepted.get(timeout=min(0.5, max(0.01, deadline - time.monotonic())))
            except queue.Empty:
                if time.monotonic() < deadline:
                    continue
                missing = sorted(set(range(1, info.world_size)) - (set(links) & set(watches)))
                raise ClusterError(
                    f"rank(s) {', '.join(map(str, missing))} never connected to the head ({host}:{listener.address[1]}) "
                    f"within {timeout:.0f} s ({_JOIN_OPTION} sets this; by default {JOIN_SKEW_FACTOR:g} × the head's own "
                    f"start-up, at least {JOIN_SKEW_MIN:g} s); did their node die at start-up, is dpbench.launcher.cluster "
                    f"running on every node, and can they reach this port?") from None
            if not conn.poll(max(0.0, deadline - time.monotonic())):
                conn.close()
                continue
            tag, rank, facts = pickle.loads(conn.recv_bytes())
            if tag == WATCH_TAG and 0 < rank < info.world_size and rank not in watches:
                watches[rank] = conn  # the agent's heartbeat connection (launcher/liveness.py)
                continue
            if tag != "hello" or not 0 < rank < info.world_size or rank in links:
                conn.close()
                continue
            links[rank] = AgentLink(rank=rank, node=facts["node"], host=facts["host"], pid=facts["pid"],
                                    conn=conn, facts=facts)
    except BaseException:
        for link in links.values():
            link.send("exit", None, 1)
            link.conn.close()
        for conn in watches.values():
            conn.close()
        raise
    finally:
        acceptor.stop()
    return links, watches


def _check_joined(links: dict[int, Any], watches: dict[int, Any],
                  checkin: _checkin.CheckinServer | None = None) -> None:
    """A node whose agent already joined and then died (its connection closed) while the head
    still waits for the others — or died while it started, before it could join (its check-in
    link closed: :mod:`dpbench.launcher.checkin`): say so now, not when the join times out."""
    lost = checkin.lost() if checkin is not None else []
    if lost:
        raise ClusterError(lost[0])
    for rank, conn in watches.items():  # the heartbeat connections: reading them takes nothing from a call
        try:
            while conn.poll(0):
                conn.recv_bytes()  # a beat (launcher/liveness.py); the head's watch reads the ones after it starts
        except (EOFError, OSError):
            link = links.get(rank)
            where = f"node {link.node} (host {link.host}, rank {rank})" if link is not None else f"rank {rank}"
            raise ClusterError(f"{where} was lost while the agents joined: its connection to the head closed "
                               f"(the process or its node died)") from None


def _hello(info: ClusterInfo) -> dict[str, Any]:
    return {**node_facts(info), "node": info.node_rank, "host": socket.gethostname()}


def _start_local_agent(info: ClusterInfo) -> tuple[Any, threading.Thread]:
    """Rank 0's own agent: the relay loop in a thread of the head, over a local pipe."""
    import multiprocessing as mp

    from dpbench.launcher.agent import serve
    from dpbench.launcher.remote import AgentLink

    head_end, agent_end = mp.Pipe(duplex=True)
    thread = threading.Thread(target=serve, args=(agent_end,), name="dpbench-cluster-agent0", daemon=True)
    thread.start()
    facts = _hello(info)
    return AgentLink(rank=0, node=info.node_rank, host=facts["host"], pid=os.getpid(), conn=head_end,
                     facts=facts), thread


def run_head(info: ClusterInfo, pytest_args: list[str], *, join_timeout: float | None,
             checkin: _checkin.CheckinServer | None = None) -> int:
    from dpbench.launcher.liveness import HeadWatch
    from dpbench.launcher.remote import heading

    try:
        store = _store(info, DEFAULT_JOIN_TIMEOUT if join_timeout is None else join_timeout)
        links, watches = _join_agents(info, store, head_join_timeout(join_timeout), checkin)
    except BaseException as exc:
        if checkin is not None:  # the agents still starting hear why, and exit 1 at once
            checkin.finish(failed=str(exc) if isinstance(exc, ClusterError) else f"the head was {type(exc).__name__}")
        raise
    if checkin is not None:
        checkin.finish()  # every agent joined: the session's heartbeats watch them from here
    link0, thread = _start_local_agent(info)
    session = HeadSession(info=info, links={0: link0, **links}, local_agent=thread)
    session.watch = HeadWatch(session.links, watches, session.on_lost)
    session.watch.start()
    print(session.summary(), flush=True)
    status = 1
    try:
        import pytest

        with heading(session):
            session.in_pytest = True
            try:
                status = int(pytest.main(pytest_args))
            finally:
                session.in_pytest = False
    except KeyboardInterrupt:
        if not session.lost:
            raise
    finally:
        missing = session.close(status)
    where = f"dpbench.launcher.cluster (rank 0, node {info.node_rank}, host {socket.gethostname()})"
    if session.lost:
        print(f"{where}: the run was stopped: {'; '.join(session.lost)}", file=sys.stderr, flush=True)
        _leave_now(1)
    gone = [r for r in missing if r != 0]
    if gone:  # a node lost at the very end: exiting 0 would leave torchrun in its exit barrier
        nodes = sorted({session.links[r].node for r in gone})
        print(f"{where}: node(s) {', '.join(map(str, nodes))} (rank(s) {', '.join(map(str, gone))}) never said "
              f"goodbye; exiting 1 so that no torchrun waits for them", file=sys.stderr, flush=True)
        return 1
    if status == 0:  # torchrun now waits in its exit barrier for every node
        _watch_exit_barrier(info)
        # Every node said goodbye and its torchrun waits for this one in the barrier: leave now,
        # not after seconds of interpreter teardown (pytest has saved and reported everything).
        _leave_now(status)
    return status


def _node_text(info: ClusterInfo) -> str:
    first = info.rank - info.local_rank
    ranks = f"rank {first}" if info.local_world_size == 1 else f"ranks {first}-{first + info.local_world_size - 1}"
    return f"node {info.node_rank}, host {socket.gethostname()}, {ranks}"


def _watch_exit_barrier(info: ClusterInfo) -> None:
    """One watch per node (local rank 0's): see :mod:`dpbench.launcher.exit_watch`."""
    from dpbench.launcher import exit_watch

    if info.local_rank == 0:
        try:
            exit_watch.start(_node_text(info))
        except OSError as exc:  # no process to start (the grace itself was checked in main())
            print(f"dpbench.launcher.cluster ({_node_text(info)}): not watching torchrun's exit barrier: {exc}",
                  file=sys.stderr, flush=True)


def run_agent(info: ClusterInfo, *, join_timeout: float | None,
              checkin: _checkin.CheckinClient | None = None) -> int:
    from dpbench.launcher.agent import serve

    join_timeout = DEFAULT_JOIN_TIMEOUT if join_timeout is None else join_timeout
    store = _store(info, join_timeout)
    try:
        head = json.loads(store.get(info.head_key))
    except RuntimeError as exc:  # DistStoreError: a timeout, or the store's host is gone
        raise ClusterError(f"the head (rank 0) never published its address in torchrun's store "
                           f"({info.master_addr}:{info.master_port}) within {join_timeout:g} s: "
                           f"{_first_line(exc)}") from None
    try:
        conn = Client((head["host"], int(head["port"])), authkey=bytes.fromhex(head["authkey"]))
    except OSError as exc:
        raise ClusterError(f"cannot connect to the head at {head['host']}:{head['port']} ({exc}); "
                           f"set DPBENCH_HEAD_ADDR on node 0 to an address the other nodes reach") from None
    conn.send_bytes(pickle.dumps(("hello", info.rank, _hello(info))))
    from dpbench.launcher.liveness import WATCH_TAG as _TAG, AgentWatch

    try:
        beat = Client((head["host"], int(head["port"])), authkey=bytes.fromhex(head["authkey"]))
    except OSError as exc:
        raise ClusterError(f"cannot open the heartbeat connection to the head at {head['host']}:{head['port']} "
                           f"({exc})") from None
    beat.send_bytes(pickle.dumps((_TAG, info.rank, None)))
    if checkin is not None:
        checkin.handover()  # joined: the heartbeats below watch the head from here
    # A lost head interrupts serve() (its workers are stopped on the way out), then main() says so.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    watch = AgentWatch(beat, lambda why: signal.pthread_kill(threading.main_thread().ident, signal.SIGINT))
    watch.start()
    try:
        status = serve(conn)
    except KeyboardInterrupt:
        if watch.lost is None:
            raise
        status = 1
    finally:
        watch.stop()
    if watch.lost is not None:
        where = f"rank {info.rank}, node {info.node_rank}, host {socket.gethostname()}"
        print(f"dpbench.launcher.cluster ({where}): lost the head (rank 0): {watch.lost}; this rank's workers "
              f"were stopped", file=sys.stderr, flush=True)
        _leave_now(1)
    if status == 0:
        _watch_exit_barrier(info)
    _leave_now(status)  # its workers are stopped (serve's finally); nothing of an agent needs teardown
    return status


def _leave_now(status: int) -> None:
    """Exit at once, skipping the interpreter's teardown (seconds with torch loaded on a busy
    node): everything this process started is stopped, and its torchrun should learn the
    outcome while the other nodes' fate is still news. (The reaper, on this pipe's EOF, checks.)"""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _started_seconds_ago() -> float:
    try:
        import psutil

        return max(0.0, time.time() - psutil.Process().create_time())
    except Exception:  # no psutil, no /proc: the cap alone
        return DEFAULT_JOIN_TIMEOUT


def head_join_timeout(given: float | None) -> float:
    """How long the head waits for every agent to join: ``--dpbench-join-timeout`` when given,
    else :data:`JOIN_SKEW_FACTOR` × the head's own start-up, within [JOIN_SKEW_MIN, DEFAULT_JOIN_TIMEOUT]."""
    if given is not None:
        return given
    return min(DEFAULT_JOIN_TIMEOUT, max(JOIN_SKEW_MIN, JOIN_SKEW_FACTOR * _started_seconds_ago()))


def _split_args(argv: list[str]) -> tuple[float | None, list[str]]:
    timeout, rest, items = None, [], iter(argv)
    for arg in items:
        if arg == _JOIN_OPTION or arg.startswith(_JOIN_OPTION + "="):
            raw = arg.partition("=")[2] if "=" in arg else next(items, "")
            try:
                timeout = float(raw)
            except ValueError:
                timeout = -1.0
            if not timeout > 0:
                raise ClusterError(f"{_JOIN_OPTION} must be a positive number of seconds, got {raw!r}")
        else:
            rest.append(arg)
    return timeout, rest


def _interrupt(signum: int, frame: Any) -> None:
    # torchrun stops its workers with SIGTERM (and SIGINT on Ctrl-C): unwind as for Ctrl-C,
    # so the head's session ends and every agent stops its workers.
    raise KeyboardInterrupt(f"signal {signum}")


def _start_checkin(info: ClusterInfo, port: int | None, where: str) -> Any:
    """The head's check-in server or an agent's check-in client (None: turned off, or the head
    could not bind the port — then said in one line, and the start is watched as before)."""
    if port == 0 or info.world_size < 2:
        return None
    port = port or _checkin.checkin_port(info.run_id, info.restart_count, info.master_port)
    key = _checkin.checkin_key(info.run_id, info.restart_count, info.master_port)
    if info.rank == 0:
        try:
            return _checkin.CheckinServer.start_for(port, key)
        except OSError as exc:
            print(f"dpbench.launcher.cluster ({where}): no start-up check-in (port {port}: {exc.strerror or exc}; "
                  f"{_checkin.PORT_ENV} picks another): a node that dies while the run starts is noticed at the "
                  f"join deadline", file=sys.stderr, flush=True)
            return None
    said = {"rank": info.rank, "node": info.node_rank, "host": socket.gethostname(), "pid": os.getpid()}
    client = _checkin.CheckinClient(
        (info.master_addr, port), key, said,
        lambda line: _checkin.leave(f"dpbench.launcher.cluster ({where}): {line}; this rank had started no workers"),
        store=(info.master_addr, info.master_port) if info.use_agent_store else None)
    client.start()
    return client


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        info = ClusterInfo.from_environ(os.environ)
    except ClusterError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    where = f"rank {info.rank}, node {info.node_rank}, host {socket.gethostname()}"
    try:
        join_timeout, pytest_args = _split_args(argv)
    except ClusterError as exc:
        print(f"dpbench.launcher.cluster ({where}): {exc}", file=sys.stderr)
        return 2
    try:
        from dpbench.launcher.exit_watch import grace

        grace()  # a bad DPBENCH_EXIT_BARRIER_GRACE is said now, not after the whole session
    except ValueError as exc:
        print(f"dpbench.launcher.cluster ({where}): {exc}", file=sys.stderr)
        return 2
    try:
        checkin_port = _checkin.port_setting(os.environ)
    except ValueError as exc:
        print(f"dpbench.launcher.cluster ({where}): {exc}", file=sys.stderr)
        return 2
    checkin = _start_checkin(info, checkin_port, where)  # before torch is imported: see launcher/checkin.py
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        if info.rank == 0:
            return run_head(info, pytest_args, join_timeout=join_timeout, checkin=checkin)
        return run_agent(info, join_timeout=join_timeout, checkin=checkin)
    except ClusterError as exc:
        print(f"dpbench.launcher.cluster ({where}): {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        if isinstance(checkin, _checkin.CheckinClient):
            checkin.settle(1.0)  # a SIGTERM from torchrun because the head died: the loss is what to say
        _checkin.last_word(f"dpbench.launcher.cluster ({where}): interrupted")
        return 130


if __name__ == "__main__":
    # Run as ``python -m dpbench.launcher.cluster`` this file is ``__main__``; the launcher and the suites
    # import ``dpbench.launcher.cluster``, a second module object: the session must live in that one.
    from dpbench.launcher.cluster import main as _main

    sys.exit(_main())
