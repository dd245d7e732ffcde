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


def test_a_hypervisors_steal_reads_as_busy_in_both_readers(monkeypatch):
    """Time the hypervisor gave another VM (``steal``, /proc/stat's eighth field) is time this
    machine's processes did not get: both readers count it busy, so a neighbour on the same host
    shows in the share other processes used (dpbench.decision.contention), not only one inside
    this machine. Guest time is inside user and nice already, and iowait is idle."""
    from collections import namedtuple

    from dpbench.sampler.cpu import _busy_and_total

    lines = iter([b"cpu  100 0 50 800 0 0 0 0 0 0\ncpu0 ...\n", b"cpu  100 0 50 900 0 0 0 100 0 0\ncpu0 ...\n"])
    reader = procfs.SystemReader()
    real_pread = os.pread
    monkeypatch.setattr(
        procfs.os, "pread", lambda fd, n, off: next(lines) if fd == reader._stat else real_pread(fd, n, off)
    )
    (busy0, total0), (busy1, total1) = reader.cpu_busy_total(), reader.cpu_busy_total()
    assert (busy1 - busy0) / (total1 - total0) == 0.5  # 100 ticks idle, 100 stolen
    reader.close()

    times = namedtuple("scputimes", "user nice system idle iowait irq softirq steal guest guest_nice")
    busy0, total0 = _busy_and_total(times(1.0, 0.0, 0.5, 8.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0))
    busy1, total1 = _busy_and_total(times(1.5, 0.0, 0.5, 9.0, 0.5, 0.0, 0.0, 1.0, 0.5, 0.0))
    # 0.5 s user (0.5 of it a guest's, not counted twice), 1 s idle, 0.5 s iowait (idle), 1 s stolen
    assert (busy1 - busy0) / (total1 - total0) == 0.5
