"""AgentLink: the head's connection to the agent of one torchrun rank, and what that agent reported.

The head of a cluster session (:mod:`dpbench.cluster.head`) opens one link per rank while the
agents join; :class:`~dpbench.cluster.remote.RemotePool` sends each rank's orders through it, and
the liveness watch (:mod:`dpbench.cluster.liveness`) marks it lost when its node goes away. A
link knows who is at the other end (rank, node, host, pid), whether the connection still holds,
and, once it dropped, how. It imports nothing heavier than the standard library, so the head can
build links before the pools are loaded.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

__all__ = ["AgentLink"]


@dataclass(kw_only=True)
class AgentLink:
    """The head's connection to the agent of one torchrun rank, and what that agent reported."""

    rank: int
    node: int  # torchrun's GROUP_RANK
    host: str
    pid: int
    conn: Connection
    facts: dict[str, Any] = field(default_factory=dict)
    alive: bool = True
    lost: str | None = None  # how the connection ended

    @property
    def label(self) -> str:
        return f"rank {self.rank} (node {self.node}, host {self.host})"

    def send(self, tag: str, pool_id: str | None, payload: Any) -> bool:
        if not self.alive:
            return False
        try:
            self.conn.send_bytes(pickle.dumps((tag, pool_id, payload)))
            return True
        except (OSError, ValueError) as exc:
            self.mark_lost(f"sending to its agent failed ({type(exc).__name__}: {exc})")
            return False

    def mark_lost(self, why: str) -> None:
        if self.alive:
            self.alive, self.lost = False, why
