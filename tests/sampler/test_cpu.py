"""The psutil backend for real: CPU %, per-process RSS (with children), pids that end."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import psutil
import pytest

from dpbench.sampler import METRIC_COLUMNS, TIMELINE_COLUMNS, ResourceSampler

MB = 1 << 20

# A child that allocates 200 MiB (and touches every page) when told to, then waits.
ALLOCATOR = """
import sys
print("ready", flush=True)
sys.stdin.readline()
block = b"\\x01" * (200 << 20)
print("allocated", flush=True)
sys.stdin.readline()
"""

# A parent whose own child does the allocating: the parent's row must include it.
PARENT = f"""
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", {ALLOCATOR!r}], stdin=sys.stdin, stdout=sys.stdout)
child.wait()
"""


def _window(frame, device, start, end):
    rows = frame[(frame.device == device) & (frame.time >= start) & (frame.time <= end)]
    return rows


def _marks(sampler) -> dict[str, float]:
    marks = sampler.marks()
    return dict(zip(marks.mark, marks.time))


def _wait_line(proc, expected: str) -> None:
    line = proc.stdout.readline().strip()
    assert line == expected, f"child said {line!r}, expected {expected!r}"


def test_cpu_backend_frame_shape():
    sampler = ResourceSampler(0.02, backend="cpu")
    with sampler:
        time.sleep(0.1)
    frame = sampler.frame()
    assert tuple(frame.columns) == TIMELINE_COLUMNS
    assert set(frame.device) == {"cpu"}
    assert frame.mark.isna().all()
    assert all(frame[c].dtype == "float64" for c in METRIC_COLUMNS)
    # GPU-only columns are unavailable (NaN), system memory is there.
    assert frame.gpu_util_pct.isna().all() and frame.power_w.isna().all()
    assert (frame.mem_total_bytes == psutil.virtual_memory().total).all()
    assert (frame.mem_used_bytes > 0).all()
    # CPU % is a rate: empty on the first sample, a percentage afterwards.
    cpu = frame.cpu_pct
    assert cpu.iloc[0] != cpu.iloc[0] and cpu.iloc[1:-1].between(0, 100).all()


def _tree_cpu(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its live descendants (what the sampler watches),
    plus what each of them collected from children it reaped: a descendant that exits during the
    window (a worker an earlier test left finishing) keeps its CPU in the total instead of taking it
    away (seen in CI: the sampler 146% against a reference that had lost such a process, 100%)."""
    total = 0.0
    root = psutil.Process(pid)
    for proc in [root, *root.children(recursive=True)]:
        try:
            times = proc.cpu_times()
        except psutil.Error:  # exited between the listing and the read
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


def _settle(pid: int, *, quiet_pct: float = 10.0, window: float = 0.3, timeout: float = 10.0) -> None:
    """Wait (at most ``timeout``) until the tree under ``pid`` uses under ``quiet_pct`` of a core:
    processes earlier tests left exiting would otherwise spend CPU inside the measured windows."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        cpu0, wall0 = _tree_cpu(pid), time.perf_counter()
        time.sleep(window)
        if 100 * (_tree_cpu(pid) - cpu0) / (time.perf_counter() - wall0) < quiet_pct:
            return


def test_busy_thread_raises_cpu_utilisation():
    stop = threading.Event()
    used: dict[str, float] = {}

    def spin():
        # The reference: the CPU time this thread really got (the machine may be shared).
        wall0, cpu0 = time.perf_counter(), time.thread_time()
        while not stop.is_set():
            pass
        used["pct"] = 100 * (time.thread_time() - cpu0) / (time.perf_counter() - wall0)

    me = os.getpid()
    process: dict[str, float] = {}
    _settle(me)
    with ResourceSampler(0.05, pids=[me], backend="cpu") as sampler:
        sampler.mark("idle")
        time.sleep(0.6)
        sampler.mark("busy")
        wall0, cpu0 = time.perf_counter(), _tree_cpu(me)
        worker = threading.Thread(target=spin)
        worker.start()
        time.sleep(1.0)
        stop.set()
        worker.join()
        # The whole tree's CPU in the busy window: the spinner plus any other thread of this
        # process (the sampler's own, threads earlier tests left parked) and any child process an
        # earlier test left running, all of which the sampler counts under pid:<me> too.
        process["pct"] = 100 * (_tree_cpu(me) - cpu0) / (time.perf_counter() - wall0)
        sampler.mark("end")
    frame, m = sampler.frame(), _marks(sampler)
    # Skip the first sample of each window: it straddles the switch.
    idle = _window(frame, f"pid:{me}", m["idle"] + 0.1, m["busy"])
    busy = _window(frame, f"pid:{me}", m["busy"] + 0.1, m["end"])
    # Enough samples in each window to average (nominally 10 and 18; the spinning thread holds the
    # GIL, so on a busy CI machine the sampler's thread gets fewer turns: 7 were seen).
    assert len(idle) >= 5 and len(busy) >= 5
    # Process CPU % is per core: it must rise by about what the spinning thread got
    # (~100 % on an idle machine, less when other work shares the cores).
    rise = busy.cpu_pct.mean() - idle.cpu_pct.mean()
    assert used["pct"] > 5, "the spinning thread got no CPU at all"
    assert rise >= 0.75 * used["pct"] - 10, (rise, used["pct"])
    # What the sampler read for the process matches what the process itself says it used.
    assert busy.cpu_pct.mean() == pytest.approx(process["pct"], abs=10 + 0.25 * process["pct"]), (
        busy.cpu_pct.mean(), process["pct"])
    # System CPU % is over all cores, and other users of the machine only add to it.
    system_busy = _window(frame, "cpu", m["busy"] + 0.1, m["end"])
    assert system_busy.cpu_pct.mean() >= 0.5 * used["pct"] / psutil.cpu_count()


@pytest.mark.parametrize("script", [ALLOCATOR, PARENT], ids=["process", "child-of-process"])
@pytest.mark.slow
def test_allocating_200_mb_shows_in_rss(script):
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        _wait_line(proc, "ready")
        # The parent's children are rescanned once a second; let the scan find the child.
        settle = 1.2 if script is PARENT else 0.2
        with ResourceSampler(0.05, pids=[proc.pid], backend="cpu") as sampler:
            time.sleep(settle)
            sampler.mark("before")
            time.sleep(0.2)
            sampler.mark("go")
            proc.stdin.write("go\n")
            proc.stdin.flush()
            _wait_line(proc, "allocated")
            sampler.mark("after")
            time.sleep(0.3)
            sampler.mark("end")
        frame, m = sampler.frame(), _marks(sampler)
        label = f"pid:{proc.pid}"
        before = _window(frame, label, m["before"], m["go"]).rss_bytes
        after = _window(frame, label, m["after"] + 0.05, m["end"]).rss_bytes
        assert len(before) >= 2 and len(after) >= 2
        grown = after.median() - before.median()
        assert 190 * MB <= grown <= 240 * MB, grown / MB
        assert sampler.summary()["devices"][label]["rss_bytes_peak"] >= before.median() + 190 * MB
    finally:
        proc.stdin.close()
        proc.wait(10)
        proc.stdout.close()


@pytest.mark.parametrize("reap", [True, False], ids=["reaped", "zombie"])
def test_pid_that_exits_mid_run_ends_its_rows(reap):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    try:
        with ResourceSampler(0.02, pids=[proc.pid], backend="cpu") as sampler:
            if reap:
                proc.wait(10)
            else:  # exited but not waited for: a zombie reports zeros instead of raising
                while psutil.Process(proc.pid).status() != psutil.STATUS_ZOMBIE:
                    time.sleep(0.01)
            time.sleep(0.3)
        summary = sampler.summary()
    finally:
        proc.wait(10)
    label = f"pid:{proc.pid}"
    info = summary["devices"][label]
    assert info["samples"] >= 3
    assert info["ended_at"] is not None and info["last_time"] < info["ended_at"]
    assert summary["duration_s"] - info["ended_at"] > 0.15  # rows ended, sampling went on
    assert summary["errors"] == []
    assert summary["devices"]["cpu"]["samples"] > info["samples"]


def test_sample_count_matches_duration_over_interval():
    interval = 0.05
    with ResourceSampler(interval, backend="cpu") as sampler:
        time.sleep(1.0)
    summary = sampler.summary()
    expected = summary["duration_s"] / interval
    # +1 for the sample at t=0 and +1 for the one at stop; missed grid points are skipped
    # (not bursted) when the machine is busy, so allow fewer.
    assert 0.7 * expected <= summary["sample_count"] <= expected + 2
    assert summary["achieved_interval_mean"] == pytest.approx(interval, rel=0.3)
    assert 0 <= summary["achieved_interval_jitter"] < interval
    assert summary["devices"]["cpu"]["samples"] == summary["sample_count"]


def test_children_from_proc_match_psutil():
    from dpbench.sampler.cpu import _proc_children

    tree = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(20)']); time.sleep(20)"
    proc = subprocess.Popen([sys.executable, "-c", tree])
    try:
        me = psutil.Process()
        deadline = time.monotonic() + 10
        while len(me.children(recursive=True)) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        expected = sorted(p.pid for p in me.children(recursive=True))
        assert len(expected) >= 2
        found = _proc_children(os.getpid())
        if found is None:
            pytest.skip("this kernel has no /proc/<pid>/task/<tid>/children (psutil fallback in use)")
        assert sorted(found) == expected
    finally:
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()
        proc.kill()
        proc.wait(10)
