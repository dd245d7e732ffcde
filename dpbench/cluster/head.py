"""The head of a cluster session (global rank 0): it gathers every agent, runs the one pytest
session with the cluster's pools installed (:func:`dpbench.cluster.remote.heading`), then tells
every agent how the session ended. See :mod:`dpbench.cluster.main` for the whole picture.
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
from multiprocessing.connection import Client, Listener
from typing import Any

from dpbench.cluster import checkin as _checkin
from dpbench.cluster.liveness import LEAVING_TAG, WATCH_TAG
from dpbench.cluster.node import (
    DEFAULT_JOIN_TIMEOUT,
    JOIN_OPTION,
    JOIN_SKEW_FACTOR,
    JOIN_SKEW_MIN,
    ClusterError,
    ClusterInfo,
    hello_facts,
    leave_now,
    open_store,
    watch_exit_barrier,
)
from dpbench.cluster.remote import active_session

__all__ = ["HeadSession", "cluster_facts", "head_join_timeout", "run_head"]

_BYE_SECONDS = 20.0


# ---------------------------------------------------------------- the session on the head
@dataclass(kw_only=True)
class HeadSession:
    """The head's view of the torchrun world: one :class:`AgentLink` per rank (rank 0 included)."""

    info: ClusterInfo
    links: dict[int, Any]
    open_pool: Any = None
    local_agent: threading.Thread | None = field(default=None, repr=False)
    watch: Any = field(default=None, repr=False)  # dpbench.cluster.liveness.HeadWatch
    lost: list[str] = field(default_factory=list)  # one line per lost node
    in_pytest: bool = False

    def on_lost(self, line: str) -> None:
        """Called by the liveness thread: stop the session wherever it is (as Ctrl-C does)."""
        self.lost.append(line)
        print(f"dpbench.cluster: {line}; stopping the run", file=sys.stderr, flush=True)
        if self.in_pytest:
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    @property
    def world_size(self) -> int:
        return self.info.world_size

    def summary(self) -> str:
        nodes: dict[int, list[int]] = {}
        for rank, link in sorted(self.links.items()):
            nodes.setdefault(link.node, []).append(rank)
        where = "; ".join(
            f"node {n} ({self.links[r[0]].host}): " + (f"rank {r[0]}" if len(r) == 1 else f"ranks {r[0]}-{r[-1]}")
            for n, r in sorted(nodes.items())
        )
        return (
            f"dpbench.cluster: {len(nodes)} node(s), world {self.world_size} — {where}. A case with n ranks "
            f"runs on ranks 0..n-1 (node 0 first); in-process strategies run on node 0."
        )

    def close(self, status: int) -> list[int]:
        """Tell every agent to stop its workers and exit with ``status``; wait for their goodbyes.

        → the ranks that never said goodbye (their node was lost before or while it ended)."""
        from dpbench.cluster.agent import wait_for_bye

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
            entry.update(
                {k: v for k, v in link.facts.items() if k not in ("rank", "local_rank", "pid", "node", "host", "ranks")}
            )
    nodes = [per_node[n] for n in sorted(per_node)]
    counts = [len(n["ranks"]) for n in nodes]
    info = session.info
    return {
        "launcher": "torchrun",
        "rendezvous_id": info.run_id,
        "restart_count": info.restart_count,
        "nodes": len(nodes),
        "world_size": info.world_size,
        "processes_per_node": counts[0] if len(set(counts)) == 1 else counts,
        "rank_order": "a case with n ranks runs on torchrun ranks 0..n-1, filling nodes in order",
        "per_node": nodes,
    }


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


def _join_agents(
    info: ClusterInfo, store: Any, timeout: float, checkin: _checkin.CheckinServer | None = None
) -> tuple[dict[int, Any], dict[int, Any]]:
    from dpbench.cluster.link import AgentLink

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
                    f"rank(s) {', '.join(map(str, missing))} never connected to the head "
                    f"({host}:{listener.address[1]}) "
                    f"within {timeout:.0f} s ({JOIN_OPTION} sets this; by default {JOIN_SKEW_FACTOR:g} × the "
                    f"head's own "
                    f"start-up, at least {JOIN_SKEW_MIN:g} s); did their node die at start-up, is dpbench.cluster "
                    f"running on every node, and can they reach this port?"
                ) from None
            if not conn.poll(max(0.0, deadline - time.monotonic())):
                conn.close()
                continue
            tag, rank, facts = pickle.loads(conn.recv_bytes())
            if tag == WATCH_TAG and 0 < rank < info.world_size and rank not in watches:
                watches[rank] = conn  # the agent's heartbeat connection (cluster/liveness.py)
                continue
            if tag != "hello" or not 0 < rank < info.world_size or rank in links:
                conn.close()
                continue
            links[rank] = AgentLink(
                rank=rank, node=facts["node"], host=facts["host"], pid=facts["pid"], conn=conn, facts=facts
            )
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


def _check_joined(
    links: dict[int, Any], watches: dict[int, Any], checkin: _checkin.CheckinServer | None = None
) -> None:
    """A node whose agent already joined and then died (its connection closed) while the head
    still waits for the others — or died while it started, before it could join (its check-in
    link closed: :mod:`dpbench.cluster.checkin`): say so now, not when the join times out."""
    lost = checkin.lost() if checkin is not None else []
    if lost:
        raise ClusterError(lost[0])
    for rank, conn in watches.items():  # the heartbeat connections: reading them takes nothing from a call
        link = links.get(rank)
        where = f"node {link.node} (host {link.host}, rank {rank})" if link is not None else f"rank {rank}"
        try:
            while conn.poll(0):
                message = pickle.loads(conn.recv_bytes())  # a beat (cluster/liveness.py), or why it leaves
                if isinstance(message, tuple) and len(message) == 2 and message[0] == LEAVING_TAG:
                    raise ClusterError(f"{where} stopped while the agents joined: {message[1]}")
        except (EOFError, OSError):
            raise ClusterError(
                f"{where} was lost while the agents joined: its connection to the head closed "
                f"(the process or its node died)"
            ) from None


def _start_local_agent(info: ClusterInfo) -> tuple[Any, threading.Thread]:
    """Rank 0's own agent: the relay loop in a thread of the head, over a local pipe."""
    import multiprocessing as mp

    from dpbench.cluster.agent import serve
    from dpbench.cluster.link import AgentLink

    head_end, agent_end = mp.Pipe(duplex=True)
    thread = threading.Thread(target=serve, args=(agent_end,), name="dpbench-cluster-agent0", daemon=True)
    thread.start()
    facts = hello_facts(info)
    return AgentLink(
        rank=0, node=info.node_rank, host=facts["host"], pid=os.getpid(), conn=head_end, facts=facts
    ), thread


def run_head(
    info: ClusterInfo,
    pytest_args: list[str],
    *,
    join_timeout: float | None,
    checkin: _checkin.CheckinServer | None = None,
) -> int:
    from dpbench.cluster.liveness import HeadWatch
    from dpbench.cluster.remote import heading

    try:
        store = open_store(info, DEFAULT_JOIN_TIMEOUT if join_timeout is None else join_timeout)
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
    where = f"dpbench.cluster (rank 0, node {info.node_rank}, host {socket.gethostname()})"
    if session.lost:
        print(f"{where}: the run was stopped: {'; '.join(session.lost)}", file=sys.stderr, flush=True)
        leave_now(1)
    gone = [r for r in missing if r != 0]
    if gone:  # a node lost at the very end: exiting 0 would leave torchrun in its exit barrier
        nodes = sorted({session.links[r].node for r in gone})
        print(
            f"{where}: node(s) {', '.join(map(str, nodes))} (rank(s) {', '.join(map(str, gone))}) never said "
            f"goodbye; exiting 1 so that no torchrun waits for them",
            file=sys.stderr,
            flush=True,
        )
        return 1
    if status == 0:  # torchrun now waits in its exit barrier for every node
        watch_exit_barrier(info)
        # Every node said goodbye and its torchrun waits for this one in the barrier: leave now,
        # not after seconds of interpreter teardown (pytest has saved and reported everything).
        leave_now(status)
    return status


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
