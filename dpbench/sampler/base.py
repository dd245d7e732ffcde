"""ResourceSampler: a background thread that samples a backend every ``interval`` seconds.

The thread only appends plain tuples to a list; tables are built on demand by ``frame()``,
``marks()``, ``summary()`` and ``save()``. Each ``start()`` begins a fresh recording with
its own state object, so a thread that outlives ``stop()`` (a blocked NVML call) can
never write into the next recording.
"""

from __future__ import annotations

import math
import os
import statistics
import threading
import time
import warnings
from dataclasses import dataclass, field
from numbers import Real
from pathlib import Path
from typing import Any

from .clocks import clock_warnings
from .cpu import CpuBackend, check_pids
from .energy import min_gpu_window_s
from .errors import ErrorLog, NvmlUnavailable, SamplerWarning
from .nvml import UTILIZATION_CAVEAT, NvmlBackend, load_nvml, probe_gpus, resolve_devices
from .timeline import build_frame, build_marks, summarize_devices, write_timeline

__all__ = ["ResourceSampler", "BACKENDS", "SHARED_CORE_MIN_INTERVAL"]

BACKENDS = ("auto", "nvml", "cpu")

# After this many samples in a row fail as a whole, the thread ends (cleanly, logged)
# instead of logging the same failure forever.
MAX_CONSECUTIVE_FAILURES = 25
# The suites' sampler (``shared_core_interval=SHARED_CORE_MIN_INTERVAL``), when its thread has no core
# of its own (every core it may use is one a watched process may use too), samples at most this often: each
# sample wakes a thread on a core the benchmark's threads are
# using, and on CPU each one (procfs reads for every watched process) takes a slice from them. With a
# spare core (WorkerPool moves the parent there) the requested interval stands.
SHARED_CORE_MIN_INTERVAL = 0.25


@dataclass
class _Recording:
    """Everything one start()…stop() produces; written by the sampling thread."""

    interval: float
    t0: float = field(default_factory=time.perf_counter)
    rows: list = field(default_factory=list)
    ticks: list = field(default_factory=list)  # times of the regular samples
    final_tick: float | None = None  # the extra sample taken at stop()
    marks: list = field(default_factory=list)
    errors: ErrorLog = field(default_factory=ErrorLog)
    now: float = 0.0  # time of the sample being taken, for error messages
    stop_event: threading.Event = field(default_factory=threading.Event)
    stopped_at: float | None = None
    thread_cpus: list | None = None  # the sampling thread's CPU affinity (None: not known)
    requested_interval: float = 0.0
    interval_reason: str | None = None  # why the thread samples less often than asked (None: it does not)
    watched_pids: tuple = ()
    shared_core_interval: float | None = None


class ResourceSampler:
    """Sample GPU (NVML) or CPU (psutil) resources in a background thread.

    ``interval``: seconds between samples (> 0). ``pids``: processes to watch (with their
    children) — the benchmark's workers — as ``pid:<pid>`` rows. ``devices``: GPUs to watch,
    as CUDA indices or ``"cuda:N"`` as the benchmark sees them (default: all visible).
    ``backend``: ``"auto"`` (NVML when it starts and a GPU is visible, else CPU), ``"nvml"``
    or ``"cpu"``. ``nvml``: the module to use instead of ``pynvml`` (any object with the
    same functions) — the extension point tests use to inject a fake.

    Errors inside the sampling thread never raise there: they are logged (see
    ``errors`` and ``summary()["errors"]``) and ``stop()`` emits one SamplerWarning.
    """

    def __init__(
        self,
        interval: float = 0.05,
        pids=None,
        *,
        devices=None,
        backend: str = "auto",
        nvml=None,
        shared_core_interval: float | None = None,
    ):
        if isinstance(interval, bool) or not isinstance(interval, Real) or not math.isfinite(interval) or interval <= 0:
            raise ValueError(f"interval: expected a positive number of seconds, found {interval!r}")
        if backend not in BACKENDS:
            raise ValueError(f"backend: expected one of {', '.join(map(repr, BACKENDS))}, found {backend!r}")
        self.interval = float(interval)
        # With no core of its own, sample at most every this many seconds (None: always ``interval``).
        self.shared_core_interval = shared_core_interval
        self.pids = check_pids(pids)
        self.backend_reason = f"backend={backend!r}"
        self._nvml = None
        self._gpus: list = []
        if backend == "cpu":
            if devices:
                raise ValueError(f"devices: {devices!r} needs the NVML backend, but backend='cpu' watches no GPU")
            self.backend = "cpu"
        else:
            try:
                self._nvml = load_nvml(nvml)
                visible = probe_gpus(self._nvml, os.environ)
            except NvmlUnavailable as exc:
                if backend == "nvml":
                    raise RuntimeError(f"backend='nvml' but NVML cannot be used: {exc}") from exc
                if devices:
                    raise ValueError(f"devices: unknown device(s) {devices!r}; available: none (NVML: {exc})") from exc
                self.backend, self.backend_reason, self._nvml = "cpu", f"NVML unavailable: {exc}", None
            else:
                self._gpus = resolve_devices(devices, visible)
                self.backend = "nvml"
                self.backend_reason = f"NVML: {len(visible)} GPU(s) visible"
        # A backend call blocked longer than this is abandoned by stop() (and logged).
        self.join_timeout = max(2.0, 10 * self.interval)
        self._recording: _Recording | None = None
        self._thread: threading.Thread | None = None
        self._backend = None
        self._describe: dict = {}  # the stopped backend's per-device info

    # -- lifecycle ---------------------------------------------------------------------
    @property
    def running(self) -> bool:
        """True between start() and stop()."""
        return self._thread is not None

    @property
    def sampling(self) -> bool:
        """True while the sampling thread is alive (it ends early after repeated failures)."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> ResourceSampler:
        """Begin a new recording (any previous one is discarded)."""
        if self.running:
            raise RuntimeError("ResourceSampler.start(): already running; call stop() first")
        rec = _Recording(
            interval=self.interval, watched_pids=tuple(self.pids or ()), shared_core_interval=self.shared_core_interval
        )

        def report(message: str) -> None:
            rec.errors.add(message, rec.now)

        cpu = CpuBackend(self.pids, report)
        backend = cpu if self.backend == "cpu" else NvmlBackend(self._nvml, self._gpus, cpu, report)
        backend.open()  # errors here raise to the caller: nothing is running yet
        rec.t0 = time.perf_counter()
        self._recording, self._backend = rec, backend
        self._thread = threading.Thread(target=self._run, args=(rec, backend), name="dpbench-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling and wait for the thread (at most ``join_timeout`` s). Idempotent."""
        self._stop(warn_stacklevel=3)

    def _stop(self, warn_stacklevel: int) -> None:
        thread, rec, backend = self._thread, self._recording, self._backend
        if thread is None:
            return
        rec.stop_event.set()
        thread.join(self.join_timeout)
        rec.stopped_at = time.perf_counter() - rec.t0
        if thread.is_alive():
            # Closing NVML under a thread still inside an NVML call is unsafe: leave both
            # to the daemon thread's fate and say so.
            rec.errors.add(
                f"sampling thread still blocked after {self.join_timeout:.1f} s; abandoned "
                "(daemon thread) without closing the backend",
                rec.stopped_at,
            )
        else:
            try:
                backend.close()
            except Exception as exc:
                rec.errors.add(f"closing the {self.backend} backend: {type(exc).__name__}: {exc}", rec.stopped_at)
        self._thread = self._backend = None
        self._describe = backend.describe()
        if len(rec.errors):
            messages = rec.errors.messages()
            warnings.warn(
                SamplerWarning(
                    f"resource sampler recorded {len(messages)} error(s); first: {messages[0]} "
                    "(all in summary()['errors'])"
                ),
                stacklevel=warn_stacklevel,  # point at the caller's stop() / with
            )

    def __enter__(self) -> ResourceSampler:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self._stop(warn_stacklevel=3)  # also on an exception in the block; the exception then propagates

    def __del__(self) -> None:
        rec = getattr(self, "_recording", None)
        if rec is not None:
            rec.stop_event.set()  # never leave a forgotten sampler polling forever

    # -- the sampling thread -----------------------------------------------------------
    @classmethod
    def _run(cls, rec: _Recording, backend) -> None:
        # A classmethod: the thread must not hold the sampler, or __del__ could never run.
        # The thread inherits the affinity of the thread that started it: a WorkerPool that
        # moved the parent onto spare cores has moved this sampler off the workers' cores.
        if hasattr(os, "sched_getaffinity"):
            rec.thread_cpus = sorted(os.sched_getaffinity(0))
        cls._quiet_on_shared_cores(rec)
        failures = 0
        interval = rec.interval
        while not rec.stop_event.is_set():
            now = time.perf_counter() - rec.t0
            if cls._tick(rec, backend, now):
                failures = 0
            else:
                failures += 1
                if failures >= MAX_CONSECUTIVE_FAILURES:
                    rec.errors.add(f"sampling stopped after {failures} failed samples in a row", now)
                    return
            rec.ticks.append(now)
            # Next point on the fixed grid t0 + k*interval. If a sample overran (slow call,
            # thread descheduled), skip the missed points instead of bursting to catch up.
            elapsed = time.perf_counter() - rec.t0
            next_t = (math.floor(elapsed / interval) + 1) * interval
            # Event.wait, not sleep: stop() wakes the thread at once.
            if rec.stop_event.wait(next_t - elapsed):
                break
        # One last sample at stop so peaks and the energy difference cover the whole window.
        now = time.perf_counter() - rec.t0
        if cls._tick(rec, backend, now):
            rec.final_tick = now

    @staticmethod
    def _quiet_on_shared_cores(rec: _Recording) -> None:
        """Sample less often when this thread shares every core it may use with the watched processes."""
        rec.requested_interval = rec.interval
        pids = [p for p in rec.watched_pids if p != os.getpid()]  # watching itself competes with nobody
        slowest = rec.shared_core_interval
        if slowest is None or rec.thread_cpus is None or not pids or rec.interval >= slowest:
            return
        watched: set[int] = set()
        for pid in pids:
            try:
                watched |= os.sched_getaffinity(pid)
            except OSError:  # gone already, or not ours to ask
                continue
        if watched and set(rec.thread_cpus) <= watched:
            rec.interval = slowest
            rec.interval_reason = (
                f"no spare core: the sampler shares cores {rec.thread_cpus} with the watched "
                f"processes, so it samples every {slowest:g} s, not every "
                f"{rec.requested_interval:g} s"
            )

    @staticmethod
    def _tick(rec: _Recording, backend, now: float) -> bool:
        rec.now = now
        rows: list = []
        try:
            backend.sample(now, rows)
        except Exception as exc:
            rec.errors.add(f"sample failed: {type(exc).__name__}: {exc}", now)
            return False
        rec.rows.extend(rows)
        return True

    # -- marks and results ---------------------------------------------------------------
    def mark(self, label: str) -> None:
        """Label the current instant on the timeline (only while running)."""
        if not isinstance(label, str) or not label:
            raise ValueError(f"mark: expected a non-empty str label, found {label!r}")
        rec = self._recording
        if not self.running or rec is None:
            raise RuntimeError("mark(): the sampler is not running; call start() or use `with`")
        rec.marks.append((time.perf_counter() - rec.t0, label))

    @property
    def errors(self) -> list[str]:
        """Errors of the latest recording (also in ``summary()["errors"]``)."""
        return self._recording.errors.messages() if self._recording else []

    def frame(self):
        """Samples as a tidy DataFrame: ``TIMELINE_COLUMNS``, NaN where unavailable."""
        rows = list(self._recording.rows) if self._recording else []
        return build_frame(rows)

    def marks(self):
        """Marks as a DataFrame with columns ``time`` and ``mark``."""
        return build_marks(list(self._recording.marks) if self._recording else [])

    def summary(self) -> dict[str, Any]:
        """Plain-JSON summary of the latest recording (NaN → None)."""
        rec = self._recording
        ticks = list(rec.ticks) if rec else []
        gaps = [b - a for a, b in zip(ticks, ticks[1:])]
        static = self._backend.describe() if self._backend is not None else self._describe
        resets = [label for label, info in static.items() if info.get("energy_reset")]
        frame = self.frame()
        devices = summarize_devices(frame, energy_resets=resets)
        for label, info in static.items():
            devices.setdefault(label, {"samples": 0}).update(info)
        duration = None
        if rec is not None:
            duration = rec.stopped_at if rec.stopped_at is not None else time.perf_counter() - rec.t0
        return {
            "backend": self.backend,
            "backend_reason": self.backend_reason,
            "interval": self.interval,
            # What the thread really used (SHARED_CORE_MIN_INTERVAL without a spare core) and why.
            "effective_interval": rec.interval if rec else None,
            "interval_reason": rec.interval_reason if rec else None,
            "duration_s": duration,
            "sample_count": len(ticks) + (1 if rec is not None and rec.final_tick is not None else 0),
            "achieved_interval_mean": statistics.fmean(gaps) if gaps else None,
            "achieved_interval_jitter": statistics.pstdev(gaps) if len(gaps) > 1 else None,
            "errors": self.errors,
            "utilization_caveat": UTILIZATION_CAVEAT if self.backend == "nvml" else None,
            "mark_count": len(rec.marks) if rec else 0,
            "thread_cpus": rec.thread_cpus if rec else None,
            # One line per GPU whose clocks floated or slowed down (always [] on CPU).
            "clock_warnings": clock_warnings(devices),
            # Whether the GPUs' readings had a window long enough to mean something (None on CPU).
            "gpu_window": self._gpu_window(frame, rec),
            "devices": devices,
        }

    def _gpu_window(self, frame, rec: _Recording | None) -> dict[str, Any] | None:
        """``window_s`` (the GPU rows' first to last sample), ``needed_s`` (:func:`min_gpu_window_s` at
        the interval the thread used) and ``short``; None where no GPU was sampled."""
        times = frame.loc[frame["device"].str.startswith("cuda:"), "time"]
        if rec is None or times.empty:
            return None
        window, needed = float(times.max() - times.min()), min_gpu_window_s(rec.interval)
        return {"window_s": window, "needed_s": needed, "short": window < needed}

    def save(self, path: str | os.PathLike) -> Path:
        """Write the timeline (samples and marks) as CSV, atomically; returns the path."""
        return write_timeline(path, self.frame(), self.marks())
