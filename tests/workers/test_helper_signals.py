"""Ctrl-C while the forkserver helper imports its preload: the helper ignores it (the parent owns
Ctrl-C and stops everything itself) instead of dying with a KeyboardInterrupt traceback — what a
busy machine showed below `dpbench run: interrupted`, the helper still importing torch."""

from __future__ import annotations

import contextlib
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


# A parent that starts the helper (and, once its preload is in, a worker that never watches for
# it, as one blocked in FileStore with the GIL held cannot), prints their pids, then is SIGKILLed.
ORPHANS = textwrap.dedent("""
    import multiprocessing as mp, os, sys, time
    from multiprocessing import forkserver
    from dpbench.workers.forkserver import PRELOAD

    def stuck(ready):
        from dpbench.workers.lifeline import die_with_parent
        assert die_with_parent(os.getppid())  # what every dpbench worker sets first: it ends with the helper
        open(ready, "w").close()
        time.sleep(120)

    if __name__ == "__main__":
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload([PRELOAD[0], "slow_preload"])
        forkserver.ensure_running()
        pids = [forkserver._forkserver._forkserver_pid]
        if sys.argv[1] == "worker":
            ready = os.path.join(os.getcwd(), "worker-ready")
            worker = ctx.Process(target=stuck, args=(ready,))
            worker.start()
            pids.append(worker.pid)
            while not os.path.exists(ready):
                time.sleep(0.02)
        else:  # inside the helper's preload
            while not os.path.exists(os.environ["SLOW_MARKER"]):
                time.sleep(0.02)
        print(*pids, flush=True)
        time.sleep(120)
""")


@pytest.mark.slow  # a fresh interpreter, a forkserver helper, a worker
@pytest.mark.parametrize("when", ["preloading", "worker"])
def test_the_helper_and_its_workers_end_within_a_second_of_their_parent(tmp_path, when):
    """Before, the helper outlived its parent until its preload ended and every worker had left,
    and a worker that could not watch its parent lived on: a signal to a starting run left both
    for the reaper's SIGKILL, past 5 s."""
    import signal as signals
    import time

    import psutil

    (tmp_path / "slow_preload.py").write_text(
        SLOW.replace("time.sleep(2)", "time.sleep(1 if os.environ.get('QUICK') else 30)")
    )
    (tmp_path / "run.py").write_text(ORPHANS)
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": path, "SLOW_MARKER": str(tmp_path / "importing")}
    if when == "worker":
        env["QUICK"] = "1"  # the preload ends; the worker is forked after it
    proc = subprocess.Popen(
        [sys.executable, str(tmp_path / "run.py"), when], cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True
    )
    pids: list[int] = []
    try:
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert len(pids) == (2 if when == "worker" else 1), pids
        orphans = [psutil.Process(p) for p in pids]
        proc.send_signal(signals.SIGKILL)
        proc.wait(timeout=30)
        ended = time.monotonic()
        _, alive = psutil.wait_procs(orphans, timeout=1.0)
        alive = [p for p in alive if _running(p)]  # a zombie has ended (this container's init may never reap it)
        assert not alive, f"{alive} still running {time.monotonic() - ended:.1f} s after their parent ended"
    finally:
        proc.kill()
        for p in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signals.SIGKILL)


def _running(proc) -> bool:
    import psutil

    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
