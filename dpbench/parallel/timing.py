"""Phase marks that never stall the host: perf_counter on CPU, CUDA events on GPUs.

A phase is the span between two marks. On CPU work is eager, so the host clock at each mark is
the answer. On CUDA the host runs ahead of the device, and synchronising at every phase
boundary would serialise the step and change the time being reported; instead each mark
records one event per device on its current stream, and the spans are read only when asked
(:func:`span_seconds` waits for the end events), after the measured work.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

import torch

__all__ = ["Mark", "mark", "span_seconds", "cuda_indices"]

# A host timestamp (CPU) or one recorded ``torch.cuda.Event`` per CUDA device index.
Mark = float | dict[int, Any]


def cuda_indices(devices: Iterable[Any]) -> tuple[int, ...]:
    """The distinct CUDA device indices among ``devices`` (strings or torch.device)."""
    indices = set()
    for device in devices:
        device = torch.device(device)
        if device.type == "cuda":
            indices.add(torch.cuda.current_device() if device.index is None else device.index)
    return tuple(sorted(indices))


def mark(indices: Sequence[int]) -> Mark:
    """A mark now: events on each CUDA device's current stream, else the host clock."""
    if not indices:
        return time.perf_counter()
    events = {}
    for index in indices:
        event = torch.cuda.Event(enable_timing=True)
        # Recorded on the device's current stream: it completes when the work queued before it has.
        event.record(torch.cuda.current_stream(index))
        events[index] = event
    return events


def span_seconds(start: Mark, end: Mark) -> float:
    """Seconds between two marks; for CUDA the longest span over the devices (waits for ``end``)."""
    if isinstance(start, float) and isinstance(end, float):
        return end - start
    if isinstance(start, float) or isinstance(end, float):
        raise TypeError("span_seconds: both marks must come from the same kind of clock")
    longest = 0.0
    for index, first in start.items():
        last = end[index]
        last.synchronize()
        longest = max(longest, first.elapsed_time(last) / 1e3)  # elapsed_time is in ms
    return longest
