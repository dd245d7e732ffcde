"""Torchrun's exit barrier, watched: a node lost after its goodbye must not keep the others waiting.

When every worker of a node exits 0, that node's torchrun waits in its *exit barrier* until every
other node's torchrun arrives, for ``exit_barrier_timeout`` (300 s; torchrun's command line cannot
change it). A node that dies after the head's goodbye — after the session ended cleanly, before
its torchrun reached the barrier — never arrives, and nothing of dpbench is alive any more to
notice: the heartbeats (:mod:`dpbench.cluster.liveness`) ended with the workers.

So the last worker of each node (local rank 0, when it exits 0) leaves this small process
behind (:func:`start`). It waits for that worker to exit, then gives the node's torchrun
:data:`GRACE_SECONDS` to leave — torchruns of healthy nodes meet in the barrier within about a
second of each other, since the head waits for every node's goodbye before it exits — and if
torchrun is still there, says so in one line naming the node and its host, and stops it
(SIGTERM, SIGKILL :data:`KILL_AFTER_SECONDS` later: in the barrier torchrun sits in a C++ wait that a
Python signal handler cannot interrupt, so it is the SIGKILL that ends it). Torchrun then exits non-zero within
``GRACE_SECONDS + KILL_AFTER_SECONDS`` (≤ 10 s) of the session's end instead of 300 s.
``DPBENCH_EXIT_BARRIER_GRACE`` (seconds) changes the grace; ``0`` turns the watch off.

It runs as ``python -I -S exit_watch.py ...`` (the standard library only, nothing of dpbench or
torch: it starts in milliseconds), without the worker's lifeline marker (the worker's reaper must
not kill it) but with the run's ``DPBENCH_RUN_ID`` (a soak finds it if it were ever left), and
it exits as soon as torchrun is gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

__all__ = ["GRACE_ENV", "GRACE_SECONDS", "KILL_AFTER_SECONDS", "grace", "start", "torchrun_parent", "watch"]

GRACE_ENV = "DPBENCH_EXIT_BARRIER_GRACE"
GRACE_SECONDS = 6.0
KILL_AFTER_SECONDS = 1.0
_POLL_SECONDS = 0.05


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [part.decode(errors="replace") for part in f.read().split(b"\0") if part]
    except OSError:
        return []


def torchrun_parent() -> int | None:
    """This process's parent when it is torchrun's elastic agent (``torchrun`` or
    ``python -m torch.distributed.run``), else None (another launcher: nothing to watch)."""
    parent = os.getppid()
    words = _cmdline(parent)
    if any(w.endswith("torchrun") or w == "torch.distributed.run" for w in words[:4]):
        return parent
    return None


def grace() -> float | None:
    """The grace from ``DPBENCH_EXIT_BARRIER_GRACE`` (default :data:`GRACE_SECONDS`); None: the watch is off."""
    raw = os.environ.get(GRACE_ENV, "")
    if not raw:
        return GRACE_SECONDS
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(
            f"{GRACE_ENV} must be a number of seconds (0 turns the exit-barrier watch off), got {raw!r}"
        ) from None
    if value < 0 or value != value:
        raise ValueError(f"{GRACE_ENV} must be ≥ 0 seconds (0 turns the exit-barrier watch off), got {raw!r}")
    return value or None


def start(where: str) -> subprocess.Popen | None:
    """Leave the watch behind for this process's torchrun (call it last, when exiting 0).

    ``where``: how the line names this node ("node 1, host a3, ranks 8-15"). → the watch's
    process, or None when this process does not run under torchrun or the watch is off."""
    from dpbench.workers.lifeline import LIFELINE_ENV  # here, in the worker: the watch itself runs without dpbench

    seconds = grace()
    agent = torchrun_parent()
    if seconds is None or agent is None:
        return None
    env = {k: v for k, v in os.environ.items() if k != LIFELINE_ENV}
    return subprocess.Popen(
        [sys.executable, "-I", "-S", os.path.abspath(__file__), str(os.getpid()), str(agent), repr(seconds), where],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        close_fds=True,
    )


def _gone(pid: int) -> bool:
    """Exited (a zombie counts: nothing runs in it any more)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] in (b"Z", b"X")
    except FileNotFoundError:
        if os.path.isdir("/proc/self"):
            return True  # Linux: no such process
    except (OSError, IndexError):
        pass
    try:  # no /proc: ask the kernel
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    return False


def _wait_gone(pid: int, seconds: float | None) -> bool:
    deadline = None if seconds is None else time.monotonic() + seconds
    while not _gone(pid):
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_SECONDS)
    return True


def watch(worker: int, agent: int, grace: float, where: str) -> int:
    # A terminal's Ctrl-C reaches torchrun too; this process has nothing to clean up and simply
    # goes on watching until torchrun is gone.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _wait_gone(worker, None)
    if _wait_gone(agent, grace):
        return 0
    print(
        f"dpbench.cluster ({where}): torchrun (pid {agent}) still waits in its exit barrier "
        f"{grace:g} s after this node's session ended: another node stopped before torchrun's exit "
        f"barrier (lost after its goodbye); stopping torchrun so that this node exits now",
        file=sys.stderr,
        flush=True,
    )
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(agent, sig)
        except ProcessLookupError:
            return 0
        if _wait_gone(agent, KILL_AFTER_SECONDS):
            return 0
    return 1


if __name__ == "__main__":
    worker_pid, agent_pid, grace_s, node = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    sys.exit(watch(worker_pid, agent_pid, grace_s, node))
