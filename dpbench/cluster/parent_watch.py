"""Every rank of a cluster session watches the torchrun agent that started it.

torchrun does not tell its workers when it dies: killed alone (an OOM kill of the agent, a
scheduler signalling the wrong process group), it leaves its ranks running as orphans — measuring
for a session nobody can use, while the other nodes wait on a store or a collective until some
timeout. A rank's parent *is* its agent, so the watch polls ``os.getppid()``: when the kernel
reparents the rank, the agent is gone. Polling because nothing portable signals it: Linux's
``PR_SET_PDEATHSIG`` fires when the *thread* that forked the child exits, not the process.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

__all__ = ["POLL_SECONDS", "ParentWatch"]

POLL_SECONDS = 0.2


class ParentWatch(threading.Thread):
    """Calls ``on_gone(pid)`` once, from this thread, when this process's parent (``pid``) is gone."""

    def __init__(self, on_gone: Callable[[int], None], *, interval: float = POLL_SECONDS):
        super().__init__(name="dpbench-cluster-parent-watch", daemon=True)
        self.parent = os.getppid()
        self.on_gone, self.interval = on_gone, interval
        self.gone = False
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(self.interval):
            if os.getppid() != self.parent:
                self.gone = True
                self.on_gone(self.parent)
                return

    def stop(self) -> None:
        self._halt.set()
