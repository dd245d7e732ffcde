"""How a measuring session meets SIGINT, SIGTERM and SIGHUP, from pytest's start to its last line.

* **Start-up** (before pytest configures the session): nothing has started and nothing can be
  saved, so one line and the exit status of an interrupted run. While the plugin imports torch
  the signal is only noted, and acted on once the imports are done: unwinding an exception
  through torch's half-done import aborted the interpreter (exit -6).
* **The session**: SIGTERM (a CI runner's cancel, ``timeout``, ``dpbench run`` passing one on) and
  SIGHUP (the terminal closed) are Ctrl-C — the trial's workers are stopped, nothing is saved,
  pytest exits 143 (129) with a line saying so (:mod:`.storage`). A second one while the session
  stops is only noted: raised, it would interrupt the stopping itself.
* **After the save**: every one of them only notes that it came: the run on disk is already
  what the exit status will say.

Handlers are installed only in the main thread and only over the defaults (a handler the
caller installed is theirs), and each is put back when the session ends.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

from dpbench._children import STOP_SIGNALS, stop_exit_code, stop_words

if TYPE_CHECKING:
    from dpbench.measure.plugin.state import DpbenchSession

__all__ = [
    "INTERRUPTED",
    "TERMINATING",
    "begin_start_up",
    "end_start_up_imports",
    "late_signals",
    "not_started_line",
    "restore",
    "session_signals",
    "stopped_by",
]

TERMINATING = tuple(sig for sig in STOP_SIGNALS if sig != signal.SIGINT)
"""The signals the session turns into Ctrl-C (SIGINT is Python's KeyboardInterrupt already)."""
# Whether (and by which signal: its name, None for Ctrl-C) the session was interrupted; read by the saving hooks.
INTERRUPTED: dict[str, Any] = {"yes": False, "signal": None}
_START_UP: dict[str, Any] = {"importing": False, "signal": None, "handlers": {}}


def stopped_by() -> signal.Signals | None:
    """The signal that interrupted the session when it was one of :data:`TERMINATING` (None: Ctrl-C, or none)."""
    name = INTERRUPTED["signal"]
    return signal.Signals[name] if name else None


def not_started_line(signum: int | None) -> str:
    """``signum``: what interrupted the start-up (None: Ctrl-C)."""
    return f"{stop_words(signum)}: nothing was saved (the run had not started); earlier runs are untouched"


def _leave_at_start_up(signum: int) -> None:
    # Through sys.stderr and SystemExit, not os._exit: pytest captures output while it loads
    # plugins and writes what it captured out when an exception (this one) leaves the load.
    print(f"dpbench: {not_started_line(signum)}", file=sys.stderr, flush=True)
    # 2: pytest's "interrupted"; the others: the shell's status for a process that signal ended.
    raise SystemExit(2 if signum == signal.SIGINT else stop_exit_code(signum))


def _start_up_signal(signum: int, frame: Any) -> None:  # noqa: ARG001 - signal handler signature
    if _START_UP["importing"]:
        _START_UP["signal"] = _START_UP["signal"] or signum
        return
    _leave_at_start_up(signum)


def begin_start_up(*, someone_else_handles: bool) -> None:
    """Before the plugin's heavy imports. ``someone_else_handles``: the process runs this pytest
    session inside its own handling (the cluster runner's head), so nothing is installed."""
    _START_UP.update(importing=True, signal=None, handlers={})
    if someone_else_handles or threading.current_thread() is not threading.main_thread():
        return
    defaults = {signal.SIGINT: signal.default_int_handler, **dict.fromkeys(TERMINATING, signal.SIG_DFL)}
    for sig, default in defaults.items():
        if signal.getsignal(sig) is default:
            _START_UP["handlers"][sig] = signal.signal(sig, _start_up_signal)


def end_start_up_imports() -> None:
    """The imports are done: a signal that came during them is acted on now."""
    _START_UP["importing"] = False
    if _START_UP["signal"] is not None:
        _leave_at_start_up(_START_UP["signal"])


def session_signals(state: DpbenchSession) -> None:
    """From pytest_configure on, the session's own handling: SIGTERM and SIGHUP are Ctrl-C at once
    (the start-up handler is replaced, never the default put back in between: a SIGTERM there
    ended pytest with -15 and no line), SIGINT is Python's KeyboardInterrupt again."""
    INTERRUPTED.update(yes=False, signal=None)
    handlers = _START_UP["handlers"]
    _terminating_interrupts(state, restore={sig: handlers.pop(sig, None) for sig in TERMINATING})
    for sig, previous in handlers.items():
        signal.signal(sig, previous)
    handlers.clear()


def _terminating_interrupts(state: DpbenchSession, restore: dict[signal.Signals, Any]) -> None:
    """``restore``: per signal, the handler :func:`restore` puts back (None: the one this replaces)."""
    if threading.current_thread() is not threading.main_thread():
        return

    def interrupt(signum: int, frame: Any) -> None:  # noqa: ARG001 - signal handler signature
        if INTERRUPTED["yes"]:
            return  # the session is stopping already (``dpbench run`` passes on what reached us both)
        name = signal.Signals(signum).name
        INTERRUPTED.update(yes=True, signal=name)
        raise KeyboardInterrupt(name)

    for sig in TERMINATING:
        replaced = signal.signal(sig, interrupt)
        state.stop_handlers[sig] = restore.get(sig) if restore.get(sig) is not None else replaced


def late_signals(state: DpbenchSession) -> None:
    """Once the run is saved (or discarded), SIGINT, SIGTERM and SIGHUP only note that they came."""
    if threading.current_thread() is not threading.main_thread():
        return

    def late(signum: int, frame: Any) -> None:  # noqa: ARG001 - signal handler signature
        state.late_signal = signal.Signals(signum).name

    state.late_handlers = {sig: signal.signal(sig, late) for sig in STOP_SIGNALS}


def restore(state: DpbenchSession) -> None:
    """Put back what the session replaced (pytest_unconfigure)."""
    for sig, previous in state.stop_handlers.items():
        signal.signal(sig, previous)
    for sig, handler in state.late_handlers.items():
        if sig not in state.stop_handlers:  # those: back to what they were before the session
            signal.signal(sig, handler)
    state.stop_handlers.clear()
