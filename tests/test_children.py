"""A command's child ends with the command: a stop is passed on, a child that does not end is
SIGKILLed after the grace period, and a SIGKILLed command takes its child with it (dpbench._children)."""

from __future__ import annotations

import contextlib
import os
import pty
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from dpbench import _children
from dpbench._children import Stopped, dies_with_us, stop_exit_code, stop_signals, stop_words, wait_stopping

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "stop, words, code",
    [
        (KeyboardInterrupt(), "interrupted", 130),
        (Stopped(signal.SIGTERM), "terminated (SIGTERM)", 143),
        (Stopped(signal.SIGHUP), "terminated (SIGHUP)", 129),
        (signal.SIGHUP, "terminated (SIGHUP)", 129),
        (None, "interrupted", 130),
    ],
)
def test_the_line_and_the_exit_status_are_the_shells_for_that_signal(stop, words, code):
    assert (stop_words(stop), stop_exit_code(stop)) == (words, code)


# Says which signal reached it, then leaves (or, with IGNORE, stays until SIGKILLed).
_CHILD = textwrap.dedent("""
    import signal, sys, time
    def note(signum, frame):
        print(signal.Signals(signum).name, flush=True)
        if not IGNORE:
            sys.exit(0)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, note)
    print("ready", flush=True)
    time.sleep(60)
""")


def _child(*, ignore: bool) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", f"IGNORE = {ignore}\n{_CHILD}"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    return proc


@pytest.fixture
def ctrl_c():
    """Ctrl-C as Python has it by default, even where this test process has it ignored (a background
    job, or a module imported earlier that ignores it)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize(
    "sig, terminal, ignore, forwarded, code",
    [
        (signal.SIGTERM, True, False, "SIGTERM\n", 0),
        (signal.SIGHUP, True, False, "SIGHUP\n", 0),
        # Ctrl-C reached the child from the terminal already: not sent again, SIGKILL after the grace.
        (signal.SIGINT, True, False, "", -signal.SIGKILL),
        # No terminal sent it to the group (kill -INT, timeout -s INT): it reached us alone.
        (signal.SIGINT, False, False, "SIGINT\n", 0),
        (signal.SIGTERM, True, True, "SIGTERM\n", -signal.SIGKILL),  # a child that stays is SIGKILLed
    ],
    ids=["sigterm", "sighup", "sigint-not-sent-again", "sigint-without-a-terminal", "sigterm-child-stays"],
)
def test_a_stop_while_waiting_is_passed_on_and_raised_once_the_child_is_gone(
    sig, terminal, ignore, forwarded, code, ctrl_c, monkeypatch
):
    monkeypatch.setattr(_children, "in_terminal_foreground", lambda: terminal)
    proc = _child(ignore=ignore)
    timer = threading.Timer(0.1, os.kill, (os.getpid(), sig))
    with pytest.raises(KeyboardInterrupt) as raised, stop_signals():
        timer.start()
        wait_stopping(proc, grace=0.3)
    timer.join()
    assert proc.returncode == code
    assert proc.stdout.read() == forwarded
    assert stop_exit_code(raised.value) == 128 + sig


def test_a_sigkilled_command_takes_its_child_with_it():
    """The command is SIGKILLed: nothing of it runs, yet its child must not live on."""
    command = "import subprocess\nfrom dpbench._children import dies_with_us\n" + textwrap.dedent("""
        child = subprocess.Popen(["sleep", "60"], preexec_fn=dies_with_us())
        print(child.pid, flush=True)
        child.wait()
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen([sys.executable, "-c", command], stdout=subprocess.PIPE, text=True, env=env)
    child = psutil.Process(int(proc.stdout.readline()))
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 2
    while child.is_running() and child.status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE, "the child outlived its SIGKILLed parent"


def test_dies_with_us_sets_the_death_signal_and_runs_the_further_steps_in_the_child():
    probe = textwrap.dedent("""
        import ctypes, signal
        got = ctypes.c_int()
        ctypes.CDLL(None).prctl(2, ctypes.byref(got), 0, 0, 0)  # PR_GET_PDEATHSIG
        print(got.value, signal.getsignal(signal.SIGINT) is signal.SIG_IGN)
    """)
    proc = subprocess.run(
        [sys.executable, "-c", probe],
        preexec_fn=dies_with_us(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)),
        capture_output=True,
        text=True,
    )
    assert proc.stdout == f"{int(signal.SIGKILL)} True\n", proc.stderr  # SIGINT ignored at exec, as the step left it


_FOREGROUND = "from dpbench._children import in_terminal_foreground; print(in_terminal_foreground(), flush=True)"


def test_only_a_process_in_its_terminals_foreground_group_counts_ctrl_c_as_reaching_its_child():
    """Under a terminal (a pty, its session leader in the foreground) yes; in a session of its own
    with no terminal (a CI job, a daemon) no: there a SIGINT was sent to the process alone."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    alone = subprocess.run(
        [sys.executable, "-c", _FOREGROUND], env=env, capture_output=True, text=True, start_new_session=True
    )
    assert alone.stdout == "False\n", alone.stderr
    pid, fd = pty.fork()
    if pid == 0:  # the child: a new session whose controlling terminal is the pty
        os.execve(sys.executable, [sys.executable, "-c", _FOREGROUND], env)
    out = b""
    with contextlib.suppress(OSError):  # EIO once the child has closed the pty
        while chunk := os.read(fd, 1024):
            out += chunk
    os.close(fd)
    _, status = os.waitpid(pid, 0)
    assert (out.decode().strip(), os.waitstatus_to_exitcode(status)) == ("True", 0), out
