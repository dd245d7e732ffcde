"""A command's child process ends with the command, whatever signal ends it.

A user or a CI runner stops a command with SIGINT (Ctrl-C: a terminal sends it to the whole
foreground process group), SIGTERM (``timeout``, a CI job's cancel, systemd: often to the command
alone), SIGHUP (the terminal closed, the ssh session dropped) or, after a grace period, SIGKILL.
``dpbench run`` and ``dpbench ab`` start their pytest sessions as children and meet all four alike:

* SIGTERM and SIGHUP raise :class:`Stopped`, a ``KeyboardInterrupt``, in the main thread
  (:func:`stop_signals`), so they unwind exactly as Ctrl-C does;
* a stop while waiting for the child is passed on to it, and the child gets
  :data:`STOP_GRACE_S` to end by itself before it is SIGKILLed (:func:`wait_stopping`);
* SIGKILL cannot be caught: the child is started with ``PR_SET_PDEATHSIG`` (:func:`dies_with_us`),
  so the kernel kills it the moment the command dies. What the child started itself (workers, a
  forkserver helper) leaves through the child's own lifeline (:mod:`dpbench.workers.lifeline`).

The exit status is the shell's for a process the signal ended (130 for Ctrl-C, 128 + signum for
the others), and the line says which signal it was (:func:`stop_words`).

Standard library only: the measuring plugin, ``dpbench run`` and ``dpbench ab`` all use it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator

__all__ = [
    "STOP_GRACE_S",
    "STOP_SIGNALS",
    "Stopped",
    "dies_with_us",
    "in_terminal_foreground",
    "stop_exit_code",
    "stop_signals",
    "stop_words",
    "wait_stopping",
]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The signals a user or a CI runner stops a command with (SIGKILL aside: it cannot be handled)."""
STOP_GRACE_S = 2.0
"""How long a child gets to end by itself once stopped: every process of a stopped run is gone
within 5 s, and a child SIGKILLed after this still has its workers leave through their lifeline."""
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP (``signum``), unwound as Ctrl-C is."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signal.Signals(signum)


def _signum(stop: BaseException | int | None) -> signal.Signals:
    if isinstance(stop, Stopped):
        return stop.signum
    if isinstance(stop, int):
        return signal.Signals(stop)
    return signal.SIGINT  # a plain KeyboardInterrupt (or nothing known): Ctrl-C


def stop_words(stop: BaseException | int | None) -> str:
    """What stopped the command, for its last line: ``interrupted`` (Ctrl-C) or ``terminated (SIGTERM)``."""
    signum = _signum(stop)
    return "interrupted" if signum == signal.SIGINT else f"terminated ({signum.name})"


def stop_exit_code(stop: BaseException | int | None) -> int:
    """The shell's exit status of a process the signal ended: 130 (Ctrl-C), 143 (SIGTERM), 129 (SIGHUP)."""
    return 128 + int(_signum(stop))


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP raise :class:`Stopped` while inside (main thread only; elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:  # noqa: ARG001 - signal handler signature
        raise Stopped(signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def dies_with_us(*also: Callable[[], None]) -> Callable[[], None]:
    """A ``preexec_fn`` giving the child ``PR_SET_PDEATHSIG`` SIGKILL (Linux; elsewhere only ``also``).

    ``prctl`` rather than a thread in the child polling ``os.getppid()``: the kernel signals at
    once, and the child needs no code of ours (pytest's start-up, an interpreter's). Its caveat —
    the signal fires when the *thread* that forked the child ends — cannot bite here: the thread
    that starts the child waits for it (:func:`wait_stopping`). SIGKILL, because nobody is left
    to read what the child would say. ``prctl`` is looked up here, before the fork, so the child
    only calls it. ``also``: further steps for the child, run after it.
    """
    parent = os.getpid()
    prctl = None
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            prctl = ctypes.CDLL(None, use_errno=True).prctl

    def preexec() -> None:
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
            if os.getppid() != parent:  # we died between the fork and prctl: no signal will come
                os._exit(1)
        for step in also:
            step()

    return preexec


def wait_stopping(proc: subprocess.Popen, *, group: bool = False, grace: float = STOP_GRACE_S) -> int:
    """``proc``'s exit status; a stop meanwhile (Ctrl-C, :class:`Stopped`) is passed on to it, and
    raised again once it is gone.

    ``group``: ``proc`` leads its own process group, which no terminal signal reaches: every stop
    is sent to the group as SIGINT (pytest stops its workers; the workers and the forkserver
    helper ignore it), then the group is SIGKILLed after ``grace``. Otherwise ``proc`` shares our
    group: SIGTERM and SIGHUP are forwarded to it, and so is SIGINT unless a terminal's Ctrl-C
    reached it already (:func:`in_terminal_foreground`: a second one would interrupt its own
    clean-up); then ``proc`` is SIGKILLed after ``grace``.
    """
    try:
        return proc.wait()
    except KeyboardInterrupt as stop:
        signum = _signum(stop)
        if group:
            _send(lambda sig: os.killpg(proc.pid, sig), signal.SIGINT)
        elif signum != signal.SIGINT or not in_terminal_foreground():
            # A SIGINT with no terminal to have sent it to the whole group (``kill -INT``, ``timeout
            # -s INT``, a CI runner) reached us alone: unforwarded, the child would only end by the
            # SIGKILL after the grace, and its workers by their lifeline's grace after that.
            _send(proc.send_signal, signum)
        _end(proc, grace=grace, kill=(lambda: os.killpg(proc.pid, signal.SIGKILL)) if group else proc.kill)
        raise


def in_terminal_foreground() -> bool:
    """Whether this process is in its controlling terminal's foreground process group: only then
    does a terminal's Ctrl-C reach the whole group, a child sharing it included."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:  # no controlling terminal (a CI job, a daemon, start_new_session)
        return False
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


def _send(send: Callable[[int], None], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        send(sig)


def _end(proc: subprocess.Popen, *, grace: float, kill: Callable[[], None]) -> None:
    """Wait up to ``grace`` for ``proc``, then SIGKILL; a further stop meanwhile only hastens the kill."""
    try:
        proc.wait(timeout=grace)
        return
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        pass
    while True:
        try:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                kill()
            proc.wait()
            return
        except KeyboardInterrupt:
            continue
