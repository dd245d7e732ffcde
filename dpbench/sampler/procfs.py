"""Lean readers of the few ``/proc`` numbers the CPU backend needs (Linux).

psutil is the portable way and remains the fallback, but its per-call Python layers cost
about three times more per sample than reading these files directly, and the sampling
thread runs 20 times a second next to the benchmark. File descriptors stay open and are
re-read with ``pread`` at offset 0 (procfs regenerates the text on each read), which also
ties each reader to one process: after it exits, reads fail instead of silently reading
a new process that reused the pid.
"""

from __future__ import annotations

import os

__all__ = ["AVAILABLE", "SystemReader", "ProcessReader", "ProcessGone"]

AVAILABLE = os.path.exists("/proc/stat") and os.path.exists("/proc/self/statm")
_CLK_TCK = os.sysconf("SC_CLK_TCK") if AVAILABLE else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if AVAILABLE else 4096


class ProcessGone(Exception):
    """The process exited (or is a zombie: exited, not yet reaped)."""


class SystemReader:
    """System CPU busy/total time from ``/proc/stat`` and memory from ``/proc/meminfo``."""

    def __init__(self) -> None:
        self._stat = os.open("/proc/stat", os.O_RDONLY)
        self._meminfo = os.open("/proc/meminfo", os.O_RDONLY)

    def cpu_busy_total(self) -> tuple[float, float]:
        # First line: "cpu user nice system idle iowait irq softirq steal guest guest_nice"
        # in clock ticks. Same accounting as psutil: guest is already inside user/nice,
        # iowait counts as idle.
        fields = [int(x) for x in os.pread(self._stat, 512, 0).split(b"\n", 1)[0].split()[1:]]
        fields += [0] * (10 - len(fields))
        total = sum(fields[:8])
        idle = fields[3] + fields[4]
        return float(total - idle), float(total)  # clock ticks: only ratios are used

    def memory_used_total(self) -> tuple[float, float]:
        """(total − MemAvailable, total) in bytes."""
        total = available = None
        for line in os.pread(self._meminfo, 8192, 0).split(b"\n"):
            if line.startswith(b"MemTotal:"):
                total = int(line.split()[1]) * 1024
            elif line.startswith(b"MemAvailable:"):
                available = int(line.split()[1]) * 1024
                break
        if total is None or available is None:
            raise OSError("/proc/meminfo has no MemTotal/MemAvailable")
        return float(total - available), float(total)

    def close(self) -> None:
        _close(self)

    def __del__(self) -> None:
        _close(self)


class ProcessReader:
    """CPU seconds and RSS of one process from ``/proc/<pid>/stat`` and ``statm``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        try:
            self._stat = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
        except (FileNotFoundError, ProcessLookupError) as exc:
            raise ProcessGone(pid) from exc
        try:
            self._statm = os.open(f"/proc/{pid}/statm", os.O_RDONLY)
        except OSError as exc:
            os.close(self._stat)
            raise ProcessGone(pid) from exc
        self._last: tuple[float, float] | None = None  # (cpu seconds, wall seconds)

    def read(self, now: float) -> tuple[float, float]:
        """(cpu % since the previous read — NaN on the first —, rss bytes)."""
        try:
            stat = os.pread(self._stat, 2048, 0)
            statm = os.pread(self._statm, 512, 0)
        except (ProcessLookupError, FileNotFoundError) as exc:
            raise ProcessGone(self.pid) from exc
        if not stat or not statm:
            raise ProcessGone(self.pid)
        # The command name (field 2) is in parentheses and may hold spaces or ")": split
        # after the last ")". Then: state, ppid, … utime (14th field) and stime (15th).
        rest = stat[stat.rindex(b")") + 2 :].split()
        if rest[0] in (b"Z", b"X"):
            raise ProcessGone(self.pid)
        cpu = (int(rest[11]) + int(rest[12])) / _CLK_TCK
        rss = float(int(statm.split()[1]) * _PAGE)
        last, self._last = self._last, (cpu, now)
        if last is None or now <= last[1]:
            return float("nan"), rss
        return 100.0 * (cpu - last[0]) / (now - last[1]), rss

    def close(self) -> None:
        _close(self)

    def __del__(self) -> None:
        _close(self)


def _close(reader) -> None:
    # Close each descriptor once and forget it: closing a number twice could close an
    # unrelated file that reused it.
    for name in ("_stat", "_statm", "_meminfo"):
        fd = getattr(reader, name, -1)
        if fd >= 0:
            setattr(reader, name, -1)
            try:
                os.close(fd)
            except OSError:
                pass
