"""The Linux /proc readers against psutil (the portable fallback) on the same process."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from dpbench.sampler import procfs
from dpbench.sampler.cpu import _PsutilProcess, _PsutilSystem

pytestmark = pytest.mark.skipif(not procfs.AVAILABLE, reason="needs Linux /proc")


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_process_reader_matches_psutil():
    fast, portable = procfs.ProcessReader(os.getpid()), _PsutilProcess(os.getpid())
    cpu_fast0, _ = fast.read(time.perf_counter())
    cpu_portable0, _ = portable.read(time.perf_counter())
    assert cpu_fast0 != cpu_fast0 and cpu_portable0 != cpu_portable0  # NaN: no rate yet
    _spin(0.4)
    cpu_fast, rss_fast = fast.read(time.perf_counter())
    cpu_portable, rss_portable = portable.read(time.perf_counter())
    # Both read the same kernel counters (10 ms ticks) over nearly the same window.
    assert cpu_fast == pytest.approx(cpu_portable, abs=15)
    assert cpu_fast > 20  # this thread spun for the whole window (the machine may be shared)
    assert abs(rss_fast - rss_portable) <= 1 << 20
    fast.close()
    fast.close()  # closing twice is harmless (and must not close a reused descriptor)


def test_process_reader_ends_on_zombie_and_on_reaped_process():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    fast, portable = procfs.ProcessReader(proc.pid), _PsutilProcess(proc.pid)
    while psutil.Process(proc.pid).status() != psutil.STATUS_ZOMBIE:
        time.sleep(0.01)
    for reader in (fast, portable):
        with pytest.raises(procfs.ProcessGone):
            reader.read(time.perf_counter())
    proc.wait(10)
    for reader in (fast, portable):
        with pytest.raises(procfs.ProcessGone):
            reader.read(time.perf_counter())
    with pytest.raises(procfs.ProcessGone):
        procfs.ProcessReader(proc.pid)
    fast.close()


def test_system_reader_matches_psutil():
    fast, portable = procfs.SystemReader(), _PsutilSystem()
    busy_f, total_f = fast.cpu_busy_total()
    busy_p, total_p = portable.cpu_busy_total()
    # The same /proc/stat line read microseconds apart; procfs keeps clock ticks, psutil
    # converts to seconds: compare the busy share since boot.
    assert busy_f / total_f == pytest.approx(busy_p / total_p, abs=1e-3)
    used_f, mem_total_f = fast.memory_used_total()
    used_p, mem_total_p = portable.memory_used_total()
    assert mem_total_f == mem_total_p
    assert used_f == pytest.approx(used_p, abs=64 << 20)
    fast.close()
