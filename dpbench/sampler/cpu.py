"""psutil backend: system CPU % and memory, and CPU % / RSS of watched processes.

Used alone where there is no GPU, and under the NVML backend for the ``cpu`` and ``pid:``
rows. Kept cheap because it runs 20 times a second next to the benchmark: Process objects
are created once and reused, children are rescanned about once a second (a rescan reads
every ``/proc/<pid>/stat``), and each sample is a flat list of floats.
"""
from __future__ import annotations

import math
import os
from typing import Callable, Mapping, Sequence

import psutil

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


class _Watched:
    """One watched pid and its children, with Process objects kept between samples
    (``Process.cpu_percent`` measures since the previous call on the same object)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.label = pid_label(pid)
        self.main = psutil.Process(pid)
        self.children: dict[int, psutil.Process] = {}
        self.next_refresh = -math.inf
        self.main.cpu_percent(None)  # prime: the first call always returns 0.0

    def refresh_children(self, now: float) -> None:
        if now < self.next_refresh:
            return
        self.next_refresh = now + CHILDREN_REFRESH_S
        pids = _proc_children(self.pid)
        try:
            if pids is None:
                pids = [p.pid for p in self.main.children(recursive=True)]
        except psutil.Error:
            return  # the main process is gone; sample() notices and ends the rows
        found = set(pids)
        for pid in pids:
            if pid not in self.children:
                try:
                    proc = psutil.Process(pid)
                    proc.cpu_percent(None)  # prime; contributes 0 % on its first sample
                except psutil.Error:
                    continue
                self.children[pid] = proc
        for pid in [p for p in self.children if p not in found]:
            del self.children[pid]

    def pids(self) -> tuple[int, ...]:
        return (self.pid, *self.children)

    @staticmethod
    def _read(proc: psutil.Process) -> tuple[float, float]:
        with proc.oneshot():  # one read of /proc/<pid>/stat for status and cpu times
            # A zombie (exited, not yet reaped) reports zeros instead of raising.
            if proc.status() == psutil.STATUS_ZOMBIE:
                raise psutil.ZombieProcess(proc.pid)
            return proc.cpu_percent(None), float(proc.memory_info().rss)

    def sample(self) -> tuple[float, float]:
        """(cpu %, rss bytes) of the process plus its children; raises psutil.Error when
        the main process has ended."""
        cpu, rss = self._read(self.main)
        for pid, proc in list(self.children.items()):
            try:
                c, r = self._read(proc)
            except psutil.Error:
                del self.children[pid]  # a child that ended just stops counting
                continue
            cpu += c
            rss += r
        return cpu, rss


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

    @property
    def pids(self) -> tuple[int, ...]:
        return self._pids

    def open(self) -> None:
        self._last = _busy_and_total(psutil.cpu_times())
        # CPU % is a rate between two readings; the first sample follows the priming
        # reading by microseconds, so its CPU % would be noise: leave it empty.
        self._first = True
        self._watched = []
        self.ended = {}
        for pid in self._pids:
            try:
                self._watched.append(_Watched(pid))
            except psutil.NoSuchProcess:
                self.ended[pid_label(pid)] = 0.0  # ended between construction and start

    def close(self) -> None:
        self._watched = []

    def pid_groups(self, now: float) -> dict[int, tuple[int, ...]]:
        """Watched pid → that pid and its current children (for GPU memory attribution)."""
        for w in self._watched:
            w.refresh_children(now)
        return {w.pid: w.pids() for w in self._watched}

    def describe(self) -> dict[str, dict]:
        info = {pid_label(p): {"ended_at": None} for p in self._pids}
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
        busy, total = _busy_and_total(psutil.cpu_times())
        first, self._first = self._first, False
        values = new_values()
        if not first and total > self._last[1]:
            values[_CPU] = 100.0 * max(0.0, busy - self._last[0]) / (total - self._last[1])
        self._last = (busy, total)
        mem = psutil.virtual_memory()
        values[_MEM_USED] = float(mem.used)
        values[_MEM_TOTAL] = float(mem.total)
        rows.append((now, SYSTEM_DEVICE, values))

        for w in list(self._watched):
            w.refresh_children(now)
            try:
                cpu, rss = w.sample()
            except psutil.AccessDenied:
                self._report_error(f"{w.label}: access denied reading the process; its samples end")
                self._end(w, now)
                continue
            except psutil.Error:  # NoSuchProcess / ZombieProcess: it exited — its rows end
                self._end(w, now)
                continue
            values = new_values()
            values[_CPU] = math.nan if first else cpu
            values[_RSS] = rss
            if proc_gpu_mem is not None:
                values[_PROC_GPU] = proc_gpu_mem.get(w.pid, math.nan)
            rows.append((now, w.label, values))

    def _end(self, watched: _Watched, now: float) -> None:
        self._watched.remove(watched)
        self.ended[watched.label] = now
