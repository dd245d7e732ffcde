"""Imported first by the forkserver helper (:data:`dpbench.workers.forkserver.PRELOAD`): Ctrl-C is
the parent's.

A terminal's Ctrl-C goes to the whole foreground process group, the helper with it. CPython's
forkserver ignores SIGINT only once its preload is imported, and importing torch takes seconds (far
more on a busy machine): a Ctrl-C then killed the helper with a KeyboardInterrupt traceback printed
below dpbench's own "interrupted" line. The parent stops everything it started itself (the workers
ignore SIGINT for the same reason, :mod:`dpbench.workers.worker`), and the helper leaves when the
parent's pipe to it closes.

Only there: imported anywhere else (a test resolving the docs' dotted names, a user's tool) it
changes nothing, since ignoring SIGINT in such a process would make Ctrl-C do nothing in it.
"""

from __future__ import annotations

import os
import signal
import sys

_FORKSERVER = os.path.join("multiprocessing", "forkserver.py")


def in_forkserver_helper() -> bool:
    """Whether this import runs inside CPython's forkserver helper, preloading (its ``main`` is on
    the stack: the helper imports its preload list from there)."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "main" and frame.f_code.co_filename.endswith(_FORKSERVER):
            return True
        frame = frame.f_back
    return False


if in_forkserver_helper():
    signal.signal(signal.SIGINT, signal.SIG_IGN)
