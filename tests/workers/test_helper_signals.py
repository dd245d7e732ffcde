"""Ctrl-C while the forkserver helper imports its preload: the helper ignores it (the parent owns
Ctrl-C and stops everything itself) instead of dying with a KeyboardInterrupt traceback — what a
busy machine showed below `dpbench run: interrupted`, the helper still importing torch."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import multiprocessing as mp, os, signal, sys, time
    from multiprocessing import forkserver
    from dpbench.workers.forkserver import PRELOAD

    if __name__ == "__main__":
        marker = sys.argv[1]
        # dpbench's first preload module, then a slow one standing in for torch's import.
        mp.get_context("forkserver").set_forkserver_preload([PRELOAD[0], "slow_preload"])
        forkserver.ensure_running()
        pid = forkserver._forkserver._forkserver_pid
        deadline = time.monotonic() + 60
        while not os.path.exists(marker):  # the helper is inside the slow import
            assert time.monotonic() < deadline, "the helper never reached its preload"
            time.sleep(0.02)
        os.kill(pid, signal.SIGINT)  # the terminal's Ctrl-C reaches the whole group
        time.sleep(1.0)
        alive = os.waitpid(pid, os.WNOHANG) == (0, 0)
        print("helper alive" if alive else "helper died", flush=True)
""")
SLOW = "import os, sys, time\nopen(os.environ['SLOW_MARKER'], 'w').close()\ntime.sleep(2)\n"


@pytest.mark.slow  # a fresh interpreter and a forkserver helper
def test_ctrl_c_while_the_helper_imports_its_preload_leaves_it_running_and_silent(tmp_path):
    (tmp_path / "slow_preload.py").write_text(SLOW)
    (tmp_path / "run.py").write_text(SCRIPT)
    marker = tmp_path / "importing"
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": path, "SLOW_MARKER": str(marker)}
    proc = subprocess.run(
        [sys.executable, str(tmp_path / "run.py"), str(marker)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "helper alive", proc.stderr[-3000:]
    assert "KeyboardInterrupt" not in proc.stderr, proc.stderr[-3000:]


def test_imported_outside_the_helper_it_leaves_ctrl_c_alone():
    # A process that imports it for another reason (the docs test resolving dotted names) keeps its
    # SIGINT handler: ignoring it there made Ctrl-C do nothing in the test process from then on.
    probe = (
        "import signal; before = signal.getsignal(signal.SIGINT); import dpbench.workers.helper_signals as h; "
        "print(signal.getsignal(signal.SIGINT) is before, h.in_forkserver_helper())"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "False"]
