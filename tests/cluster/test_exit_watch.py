"""dpbench.cluster.exit_watch on this machine: a stand-in torchrun that does not leave is stopped
after the grace with one line; one that leaves in time is left alone; the grace's bad values;
torchrun recognised as the parent only when it is one."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from dpbench.cluster import exit_watch


def _finished_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.serial  # a time bound: under pytest-xdist it runs alone
def test_a_torchrun_still_waiting_after_the_grace_is_stopped_with_one_line(capsys):
    agent = subprocess.Popen(["sleep", "60"])
    try:
        started = time.monotonic()
        assert exit_watch.watch(_finished_pid(), agent.pid, 0.5, "node 3, host h, rank 3") == 0
        took = time.monotonic() - started
        assert agent.wait(5) == -15  # sleep ends on the SIGTERM; torchrun in its barrier needs the SIGKILL
    finally:
        agent.kill()
    assert 0.5 <= took < 0.5 + exit_watch.KILL_AFTER_SECONDS + 1.0
    err = capsys.readouterr().err
    assert err == (
        f"dpbench.cluster (node 3, host h, rank 3): torchrun (pid {agent.pid}) still waits in "
        "its exit barrier 0.5 s after this node's session ended: another node stopped before torchrun's "
        "exit barrier (lost after its goodbye); stopping torchrun so that this node exits now\n"
    )


@pytest.mark.slow  # over a second under the suite's load: out of the fast tier
def test_a_torchrun_that_ignores_sigterm_is_killed():
    agent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, "
            "signal.SIG_IGN); print('ready', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert agent.stdout.readline() == b"ready\n"
        assert exit_watch.watch(_finished_pid(), agent.pid, 0.2, "node 1") == 0
        assert agent.wait(5) == -9
    finally:
        agent.kill()


def test_a_torchrun_that_leaves_in_time_is_left_alone(capsys):
    agent = subprocess.Popen(["sleep", "0.3"])
    assert exit_watch.watch(_finished_pid(), agent.pid, 5.0, "node 1") == 0
    assert agent.wait(5) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("raw", ["soon", "-1", "nan"])
def test_a_bad_grace_is_named(monkeypatch, raw):
    monkeypatch.setenv(exit_watch.GRACE_ENV, raw)
    with pytest.raises(ValueError, match=f"DPBENCH_EXIT_BARRIER_GRACE must be .*got '{raw}'"):
        exit_watch.grace()


def test_the_grace_default_and_off(monkeypatch):
    monkeypatch.delenv(exit_watch.GRACE_ENV, raising=False)
    assert exit_watch.grace() == exit_watch.GRACE_SECONDS == 6.0
    monkeypatch.setenv(exit_watch.GRACE_ENV, "0")
    assert exit_watch.grace() is None
    monkeypatch.setenv(exit_watch.GRACE_ENV, "2.5")
    assert exit_watch.grace() == 2.5


def test_torchrun_is_recognised_as_the_parent_only_when_it_is_one(tmp_path):
    child = "from dpbench.cluster.exit_watch import torchrun_parent; import os; print(torchrun_parent(), os.getppid())"
    fake = tmp_path / "torchrun"  # what a torchrun console script's command line looks like
    fake.write_text(
        textwrap.dedent(f"""\
        import subprocess, sys
        sys.exit(subprocess.run([sys.executable, "-c", {child!r}]).returncode)
        """)
    )
    out = subprocess.run([sys.executable, str(fake)], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == out[1]  # the parent's pid
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "None"
