"""Nothing outlives its parent: the process markers, the workers' parent watch, and the reaper.

Three mechanisms, each covering what the one before cannot (all from the OS, none relying on
the parent's ``finally`` blocks, which a SIGKILL never runs):

1. **A pipe whose EOF the workers watch.** Every multiprocessing child holds the read end of a
   pipe whose only write end lives in the process that asked for it (for a forkserver child:
   the pool's parent, not the helper; it is ``multiprocessing.parent_process().sentinel``).
   The kernel closes that write end when the parent dies, however it dies, so a thread in each
   worker (:func:`watch_parent`) wakes, removes the worker's rendezvous directory and exits.
   A pipe, not ``PR_SET_PDEATHSIG``, because a forkserver child's OS parent is the helper,
   and because a death signal fires when the parent *thread* that forked the child ends (a
   pool opened from a short-lived thread would lose its workers with that thread).
2. **PR_SET_PDEATHSIG towards the forkserver helper** (:func:`die_with_parent`, Linux, through
   ``prctl`` via ctypes). A forkserver child's exit status and its pool's view of it travel
   through the helper: once the helper is gone (SIGKILLed), the pool sees every worker of the
   helper as dead (exit code 255) while they may still run. So a worker gets SIGKILL the moment
   the helper dies, and the pool's report is the truth. The thread caveat does not bite here:
   the helper is single-threaded, and forks every worker from its main thread, which lives as
   long as the helper itself. The helper exits by itself once the parent and all its workers
   are gone (Python's own "alive" pipe, held by the parent and every worker).
3. **The reaper**: one small process per pool-owning process (:func:`reaper`), started in its
   own session (so a signal to the process group — a terminal's Ctrl-C, a CI runner's kill of
   the group — does not reach it), holding the read end of a pipe whose write end only the
   parent holds. The parent tells it, line by line, what it created (rendezvous directories,
   staged timelines, a save in progress); when the pipe reaches EOF (the parent ended, cleanly
   or not) it waits :data:`REAPER_GRACE_SECONDS` for the processes that carry the parent's
   :data:`LIFELINE_ENV` marker to leave, SIGKILLs the rest, removes what is still registered
   and exits. A clean exit has unregistered everything, so the reaper only checks and leaves.

Markers: :data:`RUN_ID_ENV` (``DPBENCH_RUN_ID``) names the whole run — kept when already set (a
soak, a CI job or an outer dpbench set it), else this process's id — and every worker, helper
and agent-started worker carries it in its environment (psutil finds them). :data:`LIFELINE_ENV`
is always this process's own token: the reaper kills only what *this* process started.

This file runs as the reaper with ``python -I -S lifeline.py --reap TOKEN``: the standard
library only, no dpbench, no torch.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

__all__ = [
    "HELPER_ENV",
    "LIFELINE_ENV",
    "REAPER_GRACE_SECONDS",
    "RUN_ID_ENV",
    "die_with_parent",
    "guard_worker",
    "helper_environ",
    "mark_process",
    "marked_pids",
    "reaper",
    "watch_parent",
]

RUN_ID_ENV = "DPBENCH_RUN_ID"
LIFELINE_ENV = "DPBENCH_LIFELINE"
# Set only in the environment a forkserver helper starts with (see helper_environ).
HELPER_ENV = "DPBENCH_FORKSERVER_HELPER"
# After the parent is gone, how long its processes get to leave by themselves (their own parent
# watch removes their rendezvous directories) before the reaper SIGKILLs them.
REAPER_GRACE_SECONDS = 3.0
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


# ---------------------------------------------------------------- markers
def mark_process() -> str:
    """Set this process's markers in ``os.environ`` (before it starts any child); → its token."""
    token = os.environ.get(LIFELINE_ENV, "")
    if not token.startswith(f"{os.getpid()}-"):  # inherited from a parent dpbench process
        token = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        os.environ[LIFELINE_ENV] = token
    os.environ.setdefault(RUN_ID_ENV, f"{socket.gethostname()}-{token}")
    return token


def marked_pids(name: str, value: str, *, exclude: tuple[int, ...] = ()) -> list[int]:
    """Pids of live processes whose environment has ``name=value`` (Linux ``/proc``; [] elsewhere).

    By hand rather than psutil: the reaper must run with the standard library alone.
    """
    needle = f"{name}={value}".encode()
    found = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not entry.isdigit() or int(entry) in exclude:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:  # gone, or not ours to read
            continue
    return found


def helper_environ() -> dict[str, str]:
    """Environment to add while a pool may start the forkserver helper (this module is in the
    helper's preload list): the helper then skips the interpreter's teardown when it leaves."""
    return {HELPER_ENV: "1"}


def _fast_helper_exit() -> None:
    # The helper leaves (SystemExit) once the parent and its workers are gone; the interpreter's
    # teardown with torch loaded then takes seconds on a busy machine, and the helper has
    # nothing to flush. Its forked workers end through os._exit, so this never runs in them.
    if os.environ.get(HELPER_ENV) == "1" and "multiprocessing.forkserver" in sys.modules:
        import atexit

        atexit.register(os._exit, 0)


# ---------------------------------------------------------------- the worker side
def die_with_parent(expected_parent: int | None, sig: int = signal.SIGKILL) -> bool:
    """``prctl(PR_SET_PDEATHSIG, sig)`` when this process's OS parent is ``expected_parent``.

    → True when set. Returns False (and sets nothing) off Linux, without ``expected_parent``, or
    when the parent already changed (it died before the call: the caller exits then).
    """
    if expected_parent is None or not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    # The parent may have died between fork and prctl: then no signal will ever come.
    return os.getppid() == expected_parent


def watch_parent(on_gone, *, poll_seconds: float | None = None) -> threading.Thread | None:
    """Call ``on_gone()`` in a daemon thread once the process that started this one is gone.

    Watches ``multiprocessing.parent_process().sentinel`` (the pipe described in the module
    doc); None when this process was not started by multiprocessing.
    """
    import multiprocessing
    from multiprocessing.connection import wait

    parent = multiprocessing.parent_process()
    if parent is None:
        return None
    sentinel = parent.sentinel

    def watch() -> None:
        while True:
            wait([sentinel], timeout=poll_seconds)
            try:
                if os.read(sentinel, 4096) == b"":
                    break  # EOF: the parent's end is closed
            except BlockingIOError:
                continue
            except OSError:
                break
        on_gone()

    thread = threading.Thread(target=watch, name="dpbench-parent-watch", daemon=True)
    thread.start()
    return thread


def guard_worker(rendezvous_dir: str | None) -> None:
    """First thing in a worker: die with the forkserver helper, and leave when the parent does.

    A forkserver child's OS parent is the helper (not ``parent_process()``, the pool's parent):
    it gets SIGKILL when the helper dies. A spawned child's OS parent is the pool's parent
    itself; there a death signal would fire when the *thread* that started it ends, so only
    the pipe watch is used. When the pool's parent is gone the worker removes its rendezvous
    directory (the parent cannot any more) and exits at once: nobody is left to serve.
    """
    import multiprocessing

    parent = multiprocessing.parent_process()
    helper = os.getppid()
    if parent is not None and helper != parent.pid and not die_with_parent(helper) and os.getppid() != helper:
        os._exit(1)  # the helper died before prctl: this worker's status could reach no one

    def gone() -> None:
        if rendezvous_dir:
            import shutil

            shutil.rmtree(rendezvous_dir, ignore_errors=True)
        os._exit(1)

    watch_parent(gone)


# ---------------------------------------------------------------- the parent side
class _Reaper:
    """The parent's end of the reaper (see the module doc); thread-safe, best-effort."""

    def __init__(self, token: str):
        self.token = token
        self._lock = threading.Lock()
        env = {k: v for k, v in os.environ.items() if k != LIFELINE_ENV}  # it must not find itself
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", os.path.abspath(__file__), "--reap", token, str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
            close_fds=True,
        )

    def _send(self, **message) -> None:
        with self._lock:
            try:
                self.proc.stdin.write((json.dumps(message) + "\n").encode())
                self.proc.stdin.flush()
            except (OSError, ValueError):  # the reaper is gone: the parent's own clean-up remains
                pass

    def register(self, path: str | os.PathLike) -> None:
        """Remove ``path`` (a file or a directory tree) if this process dies before :meth:`release`."""
        self._send(op="add", path=os.fspath(path))

    def release(self, path: str | os.PathLike) -> None:
        self._send(op="drop", path=os.fspath(path))

    def guard_save(
        self,
        key: str,
        *,
        root: str | os.PathLike,
        pattern: str,
        before: list[str],
        also: list[str],
        keep_complete: bool,
    ) -> None:
        """A save in progress: should this process die before :meth:`release` of ``key``, files
        matching ``root/pattern`` that were not in ``before`` are removed unless one of them
        parses as JSON and ``keep_complete``; then ``also`` goes with them."""
        self._send(
            op="guard",
            key=key,
            root=os.fspath(root),
            pattern=pattern,
            before=before,
            also=also,
            keep_complete=keep_complete,
        )


_REAPER: list[_Reaper] = []
_REAPER_LOCK = threading.Lock()


def reaper() -> _Reaper:
    """This process's reaper (started on first use, after :func:`mark_process`)."""
    with _REAPER_LOCK:
        if _REAPER and _REAPER[0].proc.poll() is None and _REAPER[0].token == os.environ.get(LIFELINE_ENV):
            return _REAPER[0]
        _REAPER[:] = [_Reaper(mark_process())]
        return _REAPER[0]


# ---------------------------------------------------------------- the reaper process
def _remove(path: str) -> None:
    import shutil

    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.unlink(path)
        except OSError:
            pass


def _parses(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            json.loads(f.read())
        return True
    except (OSError, ValueError):
        return False


def _settle_guard(guard: dict) -> None:
    new = sorted(set(glob.glob(os.path.join(guard["root"], guard["pattern"]))) - set(guard["before"]))
    if guard["keep_complete"] and any(_parses(p) for p in new):
        return
    for path in new + list(guard["also"]):
        _remove(path)


def _reap(token: str, parent: int) -> None:
    """The reaper's main: read the parent's registrations until EOF, then clean up after it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # only the pipe's EOF ends it
    paths: dict[str, None] = {}
    guards: dict[str, dict] = {}
    for line in sys.stdin.buffer:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if msg.get("op") == "add":
            paths[msg["path"]] = None
        elif msg.get("op") == "drop":
            paths.pop(msg["path"], None)
            guards.pop(msg["path"], None)
        elif msg.get("op") == "guard":
            guards[msg["key"]] = msg
    me = (os.getpid(),)
    deadline = time.monotonic() + REAPER_GRACE_SECONDS
    while marked_pids(LIFELINE_ENV, token, exclude=me) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in marked_pids(LIFELINE_ENV, token, exclude=me):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    deadline = time.monotonic() + 2.0
    while marked_pids(LIFELINE_ENV, token, exclude=me) and time.monotonic() < deadline:
        time.sleep(0.05)
    for guard in guards.values():
        _settle_guard(guard)
    for path in paths:
        _remove(path)


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "--reap":
    _reap(sys.argv[2], int(sys.argv[3]))
else:
    _fast_helper_exit()
