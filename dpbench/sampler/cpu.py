"""CPU backend: system CPU % and memory, and CPU % / RSS of watched processes.

Used alone where there is no GPU, and under the NVML backend for the ``cpu`` and ``pid:``
rows. Kept cheap because it runs 20 times a second next to the benchmark: on Linux the
numbers come straight from ``/proc`` through descriptors opened once (``procfs.py``, about
a third of psutil's cost per sample); elsewhere through psutil, with Process objects
created once and reused. Children are rescanned about once a second, and each sample is a
flat list of floats.

System memory "used" is total − available (MemAvailable), the memory not free for new
allocations without swapping.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence

import psutil

from . import procfs
from .procfs import ProcessGone
from .timeline import METRIC_INDEX, SYSTEM_DEVICE, new_values, pid_label

__all__ = ["CpuBackend", "check_pids"]

# How often (seconds) a watched process's children are looked up again.
CHILDREN_REFRESH_S = 1.0

_CPU = METRIC_INDEX["cpu_pct"]
_RSS = METRIC_INDEX["rss_bytes"]
_MEM_USED = METRIC_INDEX["mem_used_bytes"]
_MEM_TOTAL = METRIC_INDEX["mem_total_bytes"]
_PROC_GPU = METRIC_INDEX["proc_gpu_mem_bytes"]


def check_pids(pids) -> tuple[int, ...]:
    """Validate ``pids``: None or an iterable of positive ints naming running processes."""
    if pids is None:
        return ()
    if isinstance(pids, (int, str, bytes)):
        raise TypeError(f"pids: expected a list of process ids, found {type(pids).__name__} {pids!r}")
    out: list[int] = []
    for pid in pids:
        if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
            raise ValueError(f"pids: expected positive int process ids, found {pid!r}")
        if not psutil.pid_exists(pid):
            raise ValueError(f"pids: no running process with pid {pid}")
        if pid not in out:
            out.append(pid)
    return tuple(out)


def _proc_children(pid: int) -> list[int] | None:
    """Descendants of ``pid`` from ``/proc/<pid>/task/<tid>/children`` (Linux), or None
    where that file does not exist.

    About 20 us against ~2 ms for psutil's ``children(recursive=True)``, which reads the
    stat file of every process on the machine. The kernel notes the file can miss a child
    forked or reaped during the read; the next rescan (a second later) picks it up.
    """
    found: list[int] = []
    queue = [pid]
    while queue:
        parent = queue.pop()
        try:
            tids = os.listdir(f"/proc/{parent}/task")
        except OSError:
            if parent == pid:
                return None
            continue  # a descendant that just exited
        for tid in tids:
            try:
                with open(f"/proc/{parent}/task/{tid}/children") as fh:
                    kids = [int(k) for k in fh.read().split()]
            except FileNotFoundError:
                if parent == pid and not found:
                    return None  # no children files on this kernel: use psutil
                continue
            except OSError:
                continue
            for kid in kids:
                if kid not in found:
                    found.append(kid)
                    queue.append(kid)
    return found


def _busy_and_total(times) -> tuple[float, float]:
    # Same accounting as psutil.cpu_percent: guest time is already inside user/nice on
    # Linux, and iowait is idle time. We keep our own previous reading instead of calling
    # psutil.cpu_percent(None), whose "since last call" state is global to the process and
    # would be shared (and corrupted) by two samplers running at once.
    total = sum(times) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)
    idle = times.idle + getattr(times, "iowait", 0.0)
    return total - idle, total


class _PsutilSystem:
    """Portable stand-in for procfs.SystemReader."""

    def cpu_busy_total(self) -> tuple[float, float]:
        return _busy_and_total(psutil.cpu_times())

    def memory_used_total(self) -> tuple[float, float]:
        mem = psutil.virtual_memory()
        return float(mem.total - mem.available), float(mem.total)

    def close(self) -> None:
        pass


class _PsutilProcess:
    """Portable stand-in for procfs.ProcessReader (same ``read(now)`` contract)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        try:
            self._proc = psutil.Process(pid)
            self._proc.cpu_percent(None)  # start the "since last call" window
        except psutil.NoSuchProcess as exc:
            raise ProcessGone(pid) from exc
        self._first = True

    def read(self, now: float) -> tuple[float, float]:
        try:
            with self._proc.oneshot():  # one read of /proc/<pid>/stat for status and cpu
                # A zombie (exited, not yet reaped) reports zeros instead of raising.
                if self._proc.status() == psutil.STATUS_ZOMBIE:
                    raise ProcessGone(self.pid)
                cpu, rss = self._proc.cpu_percent(None), float(self._proc.memory_info().rss)
        except psutil.NoSuchProcess as exc:
            raise ProcessGone(self.pid) from exc
        except psutil.AccessDenied as exc:
            raise PermissionError(f"access denied reading pid {self.pid}") from exc
        first, self._first = self._first, False
        return (math.nan if first else cpu), rss

    def close(self) -> None:
        pass


def _system_reader():
    return procfs.SystemReader() if procfs.AVAILABLE else _PsutilSystem()


def _process_reader(pid: int):
    return procfs.ProcessReader(pid) if procfs.AVAILABLE else _PsutilProcess(pid)


class _Watched:
    """One watched pid and its children, each with a reader kept between samples (CPU %
    is a rate between two reads of the same reader)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.label = pid_label(pid)
        self.main = _process_reader(pid)  # raises ProcessGone
        self.children: dict[int, object] = {}
        self.next_refresh = -math.inf

    def refresh_children(self, now: float) -> None:
        if now < self.next_refresh:
            return
        self.next_refresh = now + CHILDREN_REFRESH_S
        pids = _proc_children(self.pid)
        if pids is None:
            try:
                pids = [p.pid for p in psutil.Process(self.pid).children(recursive=True)]
            except psutil.Error:
                return  # the main process is gone; sample() notices and ends the rows
        found = set(pids)
        for pid in pids:
            if pid not in self.children:
                try:
                    self.children[pid] = _process_reader(pid)
                except (ProcessGone, PermissionError):
                    continue
        for pid in [p for p in self.children if p not in found]:
            self.children.pop(pid).close()

    def pids(self) -> tuple[int, ...]:
        return (self.pid, *self.children)

    def sample(self, now: float) -> tuple[float, float]:
        """(cpu %, rss bytes) of the process plus its children. Raises ProcessGone when
        the main process has ended. A child's first reading has no CPU % yet and adds 0."""
        cpu, rss = self.main.read(now)
        for pid, reader in list(self.children.items()):
            try:
                c, r = reader.read(now)
            except (ProcessGone, PermissionError):
                self.children.pop(pid).close()  # a child that ended just stops counting
                continue
            if not math.isnan(c):
                cpu += c
            rss += r
        return cpu, rss

    def close(self) -> None:
        self.main.close()
        for reader in self.children.values():
            reader.close()
        self.children = {}


class CpuBackend:
    """Samples the ``cpu`` row and one ``pid:<pid>`` row per watched process."""

    name = "cpu"

    def __init__(self, pids: Sequence[int], report_error: Callable[[str], None]) -> None:
        self._pids = tuple(pids)
        self._report_error = report_error
        self._watched: list[_Watched] = []
        self.ended: dict[str, float] = {}  # pid label → time its rows ended
        self._last: tuple[float, float] = (0.0, 0.0)
        self._first = True
        self._system = None

    @property
    def pids(self) -> tuple[int, ...]:
        return self._pids

    def open(self) -> None:
        self._system = _system_reader()
        self._last = self._system.cpu_busy_total()
        # CPU % is a rate between two readings; the first sample follows the priming
        # reading by microseconds, so its CPU % would be noise: leave it empty.
        self._first = True
        self._watched = []
        self.ended = {}
        for pid in self._pids:
            try:
                self._watched.append(_Watched(pid))
            except ProcessGone:
                self.ended[pid_label(pid)] = 0.0  # ended between construction and start
            except PermissionError as exc:
                self._report_error(f"{pid_label(pid)}: cannot read the process ({exc}); not watched")
                self.ended[pid_label(pid)] = 0.0

    def close(self) -> None:
        for w in self._watched:
            w.close()
        self._watched = []
        if self._system is not None:
            self._system.close()

    def pid_groups(self, now: float) -> dict[int, tuple[int, ...]]:
        """Watched pid → that pid and its current children (for GPU memory attribution)."""
        for w in self._watched:
            w.refresh_children(now)
        return {w.pid: w.pids() for w in self._watched}

    def describe(self) -> dict[str, dict]:
        source = "procfs" if isinstance(self._system, procfs.SystemReader) else "psutil"
        info: dict[str, dict] = {SYSTEM_DEVICE: {"source": source}}
        info.update({pid_label(p): {"ended_at": None} for p in self._pids})
        # list(...) copies in one step: the sampling thread may add to `ended` meanwhile.
        for label, when in list(self.ended.items()):
            info[label]["ended_at"] = when
        return info

    def sample(
        self,
        now: float,
        rows: list,
        proc_gpu_mem: Mapping[int, float] | None = None,
    ) -> None:
        busy, total = self._system.cpu_busy_total()
        first, self._first = self._first, False
        values = new_values()
        if not first and total > self._last[1]:
            # Clamped: float rounding can land a hair outside, and some kernels let the
            # iowait counter step backwards.
            share = max(0.0, busy - self._last[0]) / (total - self._last[1])
            values[_CPU] = 100.0 * min(1.0, share)
        self._last = (busy, total)
        values[_MEM_USED], values[_MEM_TOTAL] = self._system.memory_used_total()
        rows.append((now, SYSTEM_DEVICE, values))

        for w in list(self._watched):
            w.refresh_children(now)
            try:
                cpu, rss = w.sample(now)
            except PermissionError as exc:
                self._report_error(f"{w.label}: {exc}; its samples end")
                self._end(w, now)
                continue
            except ProcessGone:  # it exited (or is a zombie): its rows end, sampling goes on
                self._end(w, now)
                continue
            values = new_values()
            values[_CPU] = cpu
            values[_RSS] = rss
            if proc_gpu_mem is not None:
                values[_PROC_GPU] = proc_gpu_mem.get(w.pid, math.nan)
            rows.append((now, w.label, values))

    def _end(self, watched: _Watched, now: float) -> None:
        watched.close()
        self._watched.remove(watched)
        self.ended[watched.label] = now
