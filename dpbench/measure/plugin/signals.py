"""How a measuring session meets SIGINT and SIGTERM, from pytest's start to its last line.

* **Start-up** (before pytest configures the session): nothing has started and nothing can be
  saved, so one line and the exit status of an interrupted run. While the plugin imports torch
  the signal is only noted, and acted on once the imports are done: unwinding an exception
  through torch's half-done import aborted the interpreter (exit -6).
* **The session**: SIGTERM (a CI runner's cancel, ``timeout``) is Ctrl-C — the trial's workers
  are stopped, nothing is saved, pytest exits 143 with a line saying so (:mod:`.storage`).
* **After the save**: SIGINT and SIGTERM only note that they came: the run on disk is already
  what the exit status will say.

Handlers are installed only in the main thread and only over the defaults (a handler the
caller installed is theirs), and each is put back when the session ends.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dpbench.measure.plugin.state import DpbenchSession

__all__ = [
    "EXIT_SIGTERM",
    "INTERRUPTED",
    "begin_start_up",
    "end_start_up_imports",
    "late_signals",
    "not_started_line",
    "restore",
    "session_signals",
]

EXIT_SIGTERM = 128 + signal.SIGTERM  # what a shell reports for a process SIGTERM ended
# Whether (and by which signal) the session was interrupted; read by the saving hooks.
INTERRUPTED: dict[str, Any] = {"yes": False, "signal": None}
_START_UP: dict[str, Any] = {"importing": False, "signal": None, "handlers": {}}


def not_started_line(sigterm: bool) -> str:
    why = "terminated (SIGTERM)" if sigterm else "interrupted"
    return f"{why}: nothing was saved (the run had not started); earlier runs are untouched"


def _leave_at_start_up(signum: int) -> None:
    # Through sys.stderr and SystemExit, not os._exit: pytest captures output while it loads
    # plugins and writes what it captured out when an exception (this one) leaves the load.
    print(f"dpbench: {not_started_line(signum == signal.SIGTERM)}", file=sys.stderr, flush=True)
    raise SystemExit(EXIT_SIGTERM if signum == signal.SIGTERM else 2)  # 2: pytest's "interrupted"


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
    for sig, default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL)):
        if signal.getsignal(sig) is default:
            _START_UP["handlers"][sig] = signal.signal(sig, _start_up_signal)


def end_start_up_imports() -> None:
    """The imports are done: a signal that came during them is acted on now."""
    _START_UP["importing"] = False
    if _START_UP["signal"] is not None:
        _leave_at_start_up(_START_UP["signal"])


def session_signals(state: DpbenchSession) -> None:
    """From pytest_configure on, the session's own handling: SIGTERM is Ctrl-C at once (the
    start-up handler is replaced, never the default put back in between: a SIGTERM there ended
    pytest with -15 and no line), SIGINT is Python's KeyboardInterrupt again."""
    INTERRUPTED.update(yes=False, signal=None)
    handlers = _START_UP["handlers"]
    _sigterm_interrupts(state, restore=handlers.pop(signal.SIGTERM, None))
    for sig, previous in handlers.items():
        signal.signal(sig, previous)
    handlers.clear()


def _sigterm_interrupts(state: DpbenchSession, restore: Any = None) -> None:
    """``restore``: the handler :func:`restore` puts back (default: the one this replaces)."""
    if threading.current_thread() is not threading.main_thread():
        return

    def interrupt(signum: int, frame: Any) -> None:  # noqa: ARG001 - signal handler signature
        INTERRUPTED.update(yes=True, signal="SIGTERM")
        raise KeyboardInterrupt("SIGTERM")

    replaced = signal.signal(signal.SIGTERM, interrupt)
    state.sigterm = restore if restore is not None else replaced


def late_signals(state: DpbenchSession) -> None:
    """Once the run is saved (or discarded), SIGINT and SIGTERM only note that they came."""
    if threading.current_thread() is not threading.main_thread():
        return

    def late(signum: int, frame: Any) -> None:  # noqa: ARG001 - signal handler signature
        state.late_signal = signal.Signals(signum).name

    state.late_handlers = {sig: signal.signal(sig, late) for sig in (signal.SIGINT, signal.SIGTERM)}


def restore(state: DpbenchSession) -> None:
    """Put back what the session replaced (pytest_unconfigure)."""
    previous = state.sigterm
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)
    for sig, handler in state.late_handlers.items():
        if sig != signal.SIGTERM or previous is None:  # SIGTERM: back to what it was before the session
            signal.signal(sig, handler)
