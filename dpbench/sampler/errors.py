"""Warnings and the error log shared by the sampler and its backends."""

from __future__ import annotations

import threading

__all__ = ["SamplerWarning", "NvmlUnavailable", "ErrorLog"]


class SamplerWarning(RuntimeWarning):
    """Raised as a warning by ``ResourceSampler.stop()`` when the sampling thread hit errors,
    and at construction when the CUDA → NVML device mapping may be ambiguous."""


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used here (no library, no driver, no visible GPU); carries the reason."""


class ErrorLog:
    """Errors seen while sampling, each message kept once with a repeat count.

    The sampling thread adds; the caller's thread reads after (or during) a run. A metric
    that fails on every tick would otherwise grow the list by 20 entries a second.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._first_time: dict[str, float] = {}

    def add(self, message: str, time: float | None = None) -> None:
        with self._lock:
            if message not in self._counts:
                self._counts[message] = 0
                self._first_time[message] = time if time is not None else float("nan")
            self._counts[message] += 1

    def __len__(self) -> int:
        with self._lock:
            return len(self._counts)

    def messages(self) -> list[str]:
        """One string per distinct error: ``"t=1.250s: <message> (x37)"``."""
        with self._lock:
            items = list(self._counts.items())
            first = dict(self._first_time)
        out = []
        for message, count in items:
            when = first[message]
            prefix = f"t={when:.3f}s: " if when == when else ""
            suffix = f" (x{count})" if count > 1 else ""
            out.append(f"{prefix}{message}{suffix}")
        return out
