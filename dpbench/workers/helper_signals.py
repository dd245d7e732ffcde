"""Imported first by the forkserver helper (:data:`dpbench.workers.forkserver.PRELOAD`): Ctrl-C is
the parent's, and the helper does not outlive its parent.

A terminal's Ctrl-C goes to the whole foreground process group, the helper with it. CPython's
forkserver ignores SIGINT only once its preload is imported, and importing torch takes seconds (far
more on a busy machine): a Ctrl-C then killed the helper with a KeyboardInterrupt traceback printed
below dpbench's own "interrupted" line. The parent stops everything it started itself (the workers
ignore SIGINT for the same reason, :mod:`dpbench.workers.worker`), and the helper leaves when the
parent's pipe to it closes.

When the parent ends, the helper ends at once, whatever it is doing (:func:`_leave_with_parent`).
CPython's helper would leave only once its parent *and every worker* had closed its "alive" pipe, and
notice even the parent's end only in its main loop, after the preload. A signal that ended the
parent while the helper still imported torch (seconds on a busy machine) left it importing on, then
serving the fork requests queued before the parent ended; a worker waiting in ``FileStore`` for a
rank that never started holds the GIL, so its own watch of the parent (a Python thread,
:func:`dpbench.workers.lifeline.guard_worker`) could not run. Both waited for the parent's reaper to
SIGKILL them 3 s later: past the 5 s within which every signal must end a run. The helper's own end
kills its workers through their death signal (:func:`dpbench.workers.lifeline.die_with_parent`),
which needs no GIL; the reaper removes what they leave.

Only there: imported anywhere else (a test resolving the docs' dotted names, a user's tool) it
changes nothing, since ignoring SIGINT in such a process would make Ctrl-C do nothing in it.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import threading
import time

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


PARENT_POLL_SECONDS = 0.1


def _leave_with_parent(parent: int) -> None:
    """The helper's watch (a daemon thread): ``os._exit`` once ``parent`` has ended. Blocked in
    ``select`` on a pidfd (Linux 5.3+) or sleeping between ``getppid()`` polls, it holds no lock a
    forked worker could inherit locked, and it wakes no more than ten times a second."""
    fd = None
    with contextlib.suppress(AttributeError, OSError):
        fd = os.pidfd_open(parent)
    if fd is not None and os.getppid() == parent:  # opened while it lived: readable when it ends
        select.select([fd], [], [])
    else:  # getppid() changes when the parent process ends (this one is re-parented)
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_SECONDS)
    os._exit(0)  # nothing to flush; its workers get SIGKILL through their death signal (lifeline.py)


if in_forkserver_helper():
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_leave_with_parent, args=(os.getppid(),), name="dpbench-parent-watch", daemon=True).start()
