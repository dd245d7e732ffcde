"""Heartbeats between the head and every agent of a cluster session (``dpbench.cluster``).

Each agent opens a second authenticated connection to the head, used for nothing but
liveness, watched by a thread at each end (never by the code that runs cases, so a node is
watched wherever the run is — in a call, between cases, during a trial's set-up, in the save):

* both ends send a beat every :data:`BEAT_SECONDS`;
* the connection closing (the process died, its node rebooted) is noticed at once;
* no beat for :data:`LOST_AFTER_SECONDS` (the node hangs, its network is down — no FIN ever
  comes) is noticed then;
* an agent that stops on its own (its torchrun agent died: :mod:`dpbench.cluster.parent_watch`)
  says why first (``("leaving", why)``), so the head names the cause, not just a closed connection.

On the head a lost node marks every rank of that node lost and calls ``on_lost`` once with one
line naming the node, its host and its ranks (the cluster runner then interrupts the session:
nothing half-measured is saved). On an agent a lost head calls ``on_lost`` (the runner stops the
agent's workers and exits 1). Separate connections because the case code reads the main ones
only while it waits for a result, and a beat must never interleave with a call's bytes.
"""

from __future__ import annotations

import pickle
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from typing import Any

__all__ = ["AgentWatch", "BEAT_SECONDS", "HeadWatch", "LEAVING_TAG", "LOST_AFTER_SECONDS", "WATCH_TAG"]

BEAT_SECONDS = 1.0
# Six missed beats: a loaded node's beats can be late by a second or two, never by six.
LOST_AFTER_SECONDS = 6.0
WATCH_TAG = "watch"  # the first message on a liveness connection: ("watch", rank, None)
LEAVING_TAG = "leaving"  # an agent's last message when it stops on its own: ("leaving", why)
_EOF_WHY = "its connection closed (the node, or its dpbench.cluster agent, died)"


def _beat(conn: Connection) -> bool:
    try:
        conn.send_bytes(pickle.dumps(("beat", time.time())))
        return True
    except (OSError, ValueError):
        return False


def _drain(conn: Connection) -> tuple[bool, str | None]:
    """Read what is there → (still open, why the other end said it is leaving, if it did)."""
    said = None
    try:
        while conn.poll():
            message = pickle.loads(conn.recv_bytes())
            if isinstance(message, tuple) and len(message) == 2 and message[0] == LEAVING_TAG:
                said = str(message[1])
        return True, said
    except (EOFError, OSError):
        return False, said


class HeadWatch(threading.Thread):
    """The head's end: beats to and from every remote agent; a silent or closed one is lost."""

    def __init__(self, links: dict[int, Any], conns: dict[int, Connection], on_lost: Callable[[str], None]):
        super().__init__(name="dpbench-cluster-liveness", daemon=True)
        self.links, self.conns, self.on_lost = links, dict(conns), on_lost
        self.heard = {rank: time.monotonic() for rank in conns}
        self.lost_nodes: dict[int, str] = {}  # node → the line that reported it
        self.leaving: set[int] = set()  # ranks told to exit: their connection closes by design
        self._halt = threading.Event()

    def node_line(self, node: int, why: str) -> str:
        ranks = sorted(r for r, link in self.links.items() if link.node == node)
        host = self.links[ranks[0]].host
        which = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"
        return f"node {node} (host {host}, {which}) lost: {why}"

    def _lose(self, rank: int, why: str) -> None:
        self.conns.pop(rank, None)
        node = self.links[rank].node
        if node in self.lost_nodes:
            return
        line = self.node_line(node, why)
        self.lost_nodes[node] = line
        for link in self.links.values():
            if link.node == node:
                link.mark_lost(f"its node was lost: {why}")
        self.on_lost(line)

    def run(self) -> None:
        next_beat = 0.0
        while not self._halt.is_set():
            now = time.monotonic()
            if now >= next_beat:
                for rank, conn in list(self.conns.items()):
                    if not _beat(conn) and rank not in self.leaving:
                        self._lose(rank, _EOF_WHY)
                next_beat = now + BEAT_SECONDS
            by_conn = {conn: rank for rank, conn in self.conns.items()}
            for conn in wait(list(by_conn), timeout=0.25) if by_conn else ():
                rank = by_conn[conn]
                alive, said = _drain(conn)
                if said is not None:
                    self._lose(rank, said)
                elif alive:
                    self.heard[rank] = time.monotonic()
                elif rank in self.leaving:
                    self.conns.pop(rank, None)
                else:
                    self._lose(rank, _EOF_WHY)
            if not by_conn:
                self._halt.wait(0.25)
            now = time.monotonic()
            for rank in list(self.conns):
                silent = now - self.heard[rank]
                if silent > LOST_AFTER_SECONDS and rank not in self.leaving:
                    self._lose(rank, f"no heartbeat for {silent:.0f} s (the node hangs, or the network to it is down)")

    def stop(self) -> None:
        self._halt.set()
        self.join(2.0)
        for conn in self.conns.values():
            conn.close()


class AgentWatch(threading.Thread):
    """An agent's end: beats to the head, and ``on_lost(why)`` once the head is silent or gone."""

    def __init__(self, conn: Connection, on_lost: Callable[[str], None]):
        super().__init__(name="dpbench-agent-liveness", daemon=True)
        self.conn, self.on_lost = conn, on_lost
        self.lost: str | None = None
        self._leaving: str | None = None
        self._halt = threading.Event()

    def say_leaving(self, why: str) -> None:
        """Tell the head, before this agent stops on its own, why (sent by this thread: a beat and
        this message must never interleave on the connection)."""
        self._leaving = why

    def run(self) -> None:
        heard = next_beat = time.monotonic()
        while not self._halt.is_set():
            now = time.monotonic()
            if self._leaving is not None:
                try:
                    self.conn.send_bytes(pickle.dumps((LEAVING_TAG, self._leaving)))
                except (OSError, ValueError):
                    pass  # the head is gone too: nobody to tell
                return
            if now >= next_beat:
                if not _beat(self.conn):
                    return self._lose(_EOF_WHY.replace("agent", "head"))
                next_beat = now + BEAT_SECONDS
            if wait([self.conn], timeout=0.25):
                if not _drain(self.conn)[0]:
                    return self._lose("its connection closed (the head's node, or its pytest session, died)")
                heard = time.monotonic()
            elif time.monotonic() - heard > LOST_AFTER_SECONDS:
                return self._lose(
                    f"no heartbeat from it for {time.monotonic() - heard:.0f} s "
                    f"(its node hangs, or the network to it is down)"
                )

    def _lose(self, why: str) -> None:
        if self._halt.is_set():
            return  # leaving anyway: the head closing the connection is how a session ends
        self.lost = why
        self.on_lost(why)

    def stop(self) -> None:
        self._halt.set()
        self.join(2.0)
        self.conn.close()
