"""The forkserver helper that every local worker is forked from: the start method, what the helper
preloads, whether it is alive, and :func:`fresh_forkserver`, which the suites call before each trial
pass (its docstring says why). :class:`~dpbench.workers.pool.WorkerPool` registers
itself here (:func:`track_pool`) so that the helper is never restarted under a live pool.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import weakref
from typing import Any

__all__ = ["PRELOAD", "START_METHOD", "fresh_forkserver", "helper_alive", "track_pool", "worker_start"]

# Workers are forked from Python's forkserver helper, which imports torch once (it never
# touches CUDA, so its forks may use CUDA, as torch documents for "forkserver"). A fresh
# "spawn" child pays ~3-8 s importing torch and torch._dynamo (pulled in by torch.optim);
# a forkserver child starts in ~0.1 s. Where there is no forkserver, spawn is used.
START_METHOD = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
PRELOAD = [
    "dpbench.workers.helper_signals",  # first: Ctrl-C is the parent's; the helper ends with the parent
    "torch",
    "torch.distributed",
    "torch.optim",
    "torch._dynamo",
    "torch.nn.parallel",
    "dpbench.workers.worker",
    "dpbench.workers.lifeline",
]

_OPEN_POOLS: weakref.WeakSet[Any] = weakref.WeakSet()


def track_pool(pool: Any) -> None:
    """A pool starting workers (it has a ``closed`` property): :func:`fresh_forkserver` waits for it."""
    _OPEN_POOLS.add(pool)


def helper_alive() -> bool:
    """Is this process's forkserver helper still running? (True where there is none to ask about.)"""
    if START_METHOD != "forkserver":
        return True
    from multiprocessing import forkserver

    pid = getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)
    if pid is None:
        return True
    try:  # WNOWAIT: multiprocessing must still find the helper's status when it restarts it
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
    except (ChildProcessError, AttributeError):
        return False


# What :func:`worker_start` says (saved in results: constants, so runs stay comparable).
WORKER_START_FRESH_HELPER = "forkserver, a fresh helper each trial pass"
WORKER_START_ONE_HELPER = "forkserver, one helper per session"
WORKER_START_SPAWN = "spawn"


def worker_start(fresh_each_pass: bool) -> str:
    """How a session's workers start, as results record it (``harness_settings.worker_start``)."""
    if START_METHOD != "forkserver":
        return WORKER_START_SPAWN
    return WORKER_START_FRESH_HELPER if fresh_each_pass and _can_stop_helper() else WORKER_START_ONE_HELPER


def _can_stop_helper() -> bool:
    from multiprocessing import forkserver

    return callable(getattr(getattr(forkserver, "_forkserver", None), "_stop", None))


def fresh_forkserver() -> bool:
    """Stop this process's forkserver helper, so that the next worker starts a new one. → whether
    one was running and was stopped.

    Why: every worker is forked from the helper, and inherits its luck — where its imports put
    torch's code and heap, which the workers' hot loops then share. One helper per session moves
    every case of the session together, beyond the trial spread; a fresh helper per trial does not
    (measurements: docs/calibration.md#fresh-forkserver-helper). With a fresh helper before each
    trial pass, the helper's luck becomes
    trial-to-trial spread that a case's trials average over, instead of a level that moves the whole
    session — pyperf's habit of fresh processes, carried to the process the workers come from.

    multiprocessing has no public way to restart its helper; ``ForkServer._stop`` is what CPython's
    own tests call (present in 3.8-3.13). Without it nothing is stopped (and :func:`worker_start`
    says one helper per session). Refused while a pool is open: its workers die with the helper.
    """
    if START_METHOD != "forkserver" or not _can_stop_helper():
        return False
    open_pools = [p for p in list(_OPEN_POOLS) if not p.closed]
    if open_pools:
        raise RuntimeError(
            f"fresh_forkserver: {len(open_pools)} worker pool(s) still open; their workers would die "
            f"with the helper: close them first"
        )
    from multiprocessing import forkserver

    server = forkserver._forkserver
    if getattr(server, "_forkserver_pid", None) is None:
        return False
    try:
        server._stop()  # closes the helper's "alive" pipe (it leaves at once) and reaps it
    except (ChildProcessError, OSError):
        # Already gone (killed, and reaped): forget it, so the next start launches a new one.
        server._forkserver_pid = server._forkserver_address = server._forkserver_alive_fd = None
    return True
