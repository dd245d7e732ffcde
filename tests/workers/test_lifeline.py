"""Nothing outlives a killed parent (issue 18): workers, the forkserver helper, rendezvous and
staging directories are gone within 5 s of a SIGKILL of the process that owned them, found by
the environment marker every process of the run carries (psutil)."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from dpbench.launcher import WorkerPool
from dpbench.workers.lifeline import LIFELINE_ENV, RUN_ID_ENV, marked_pids

HERE = Path(__file__).resolve().parent


def _marked(run_id: str) -> list[psutil.Process]:
    out = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(RUN_ID_ENV) == run_id and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return out


def _gone_within(run_id: str, paths: list[str], seconds: float) -> tuple[float, list, list]:
    start = time.monotonic()
    while True:
        left = _marked(run_id)
        dirs = [p for p in paths if p and os.path.exists(p)]
        if (not left and not dirs) or time.monotonic() - start > seconds:
            return time.monotonic() - start, left, dirs
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["idle", "call", "stage", "alone"])
def test_sigkill_of_the_parent_leaves_nothing_within_5_s(mode, tmp_path):
    run_id = uuid.uuid4().hex
    env = {**os.environ, RUN_ID_ENV: run_id}
    env.pop(LIFELINE_ENV, None)
    err = tmp_path / "stderr.txt"  # a file, not a pipe: nobody reads it while the child runs
    with open(err, "w") as err_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.workers._orphan_parent", mode],
            cwd=HERE.parents[1],
            env=env,
            stdout=subprocess.PIPE,
            stderr=err_file,
            text=True,
        )
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 60.0)  # a stuck child fails here, not at the timeout
        if not ready:
            proc.kill()
            proc.wait(10)
            pytest.fail(f"_orphan_parent.py {mode} printed nothing within 60 s: {err.read_text()[-3000:]}")
        info = json.loads(proc.stdout.readline())
        if mode in ("call", "alone"):
            time.sleep(0.5)  # rank 0 is inside the hanging call
        # parent, helper, 2 workers (+ the reaper) / parent, reaper
        assert len(_marked(run_id)) >= (2 if mode == "stage" else 4)
        proc.kill()
        proc.wait(10)
        took, left, dirs = _gone_within(run_id, [info["rdzv"], info["staged"]], 10.0)
    finally:
        if proc.poll() is None:
            proc.kill()
    for p in _marked(run_id):
        p.kill()
    assert not left, [(p.pid, p.cmdline()) for p in left]
    assert not dirs
    print(f"gone {took:.2f} s after the kill")
    assert took < 5.0
    for pid in info["pids"]:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


@pytest.mark.slow
def test_every_worker_carries_this_process_markers():
    with WorkerPool(2, process_group=False) as pool:
        token = os.environ[LIFELINE_ENV]
        assert token.startswith(f"{os.getpid()}-") and os.environ[RUN_ID_ENV]
        found = set(marked_pids(LIFELINE_ENV, token))
        assert set(pool.pids) <= found  # and the forkserver helper with them


@pytest.mark.slow
def test_a_killed_forkserver_helper_fails_the_case_naming_it_and_the_next_pool_starts():
    from multiprocessing import forkserver

    from _launch_helpers import recall, remember

    from dpbench.launcher import WorkerError
    from dpbench.workers.forkserver import helper_alive

    pool = WorkerPool(2, process_group=False, timeout=30.0)
    helper = forkserver._forkserver._forkserver_pid
    os.kill(helper, signal.SIGKILL)
    # kill() returns before the helper is dead: the kernel frees its memory (torch, preloaded) before
    # it sends its workers PR_SET_PDEATHSIG, and an idle worker could answer a call sent meanwhile.
    # Once it reads dead, both workers have their SIGKILL and the call reaches neither.
    deadline = time.monotonic() + 5
    while helper_alive():
        assert time.monotonic() < deadline, "the killed forkserver helper still reads alive after 5 s"
        time.sleep(0.01)
    with pytest.raises(WorkerError, match="forkserver helper that started it is gone") as info:
        pool.run(remember, 3)
    assert set(info.value.failures) == {0, 1}
    deadline = time.monotonic() + 5
    while any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pool.pids):
        assert time.monotonic() < deadline, "workers outlived their killed helper"
        time.sleep(0.05)
    with WorkerPool(2, process_group=False) as fresh:  # a new helper starts
        fresh.run(remember, 2)
        assert fresh.run(recall) == [2, 4]
