"""Resource sampler: GPU utilization, memory, power, energy and clocks through NVML, and CPU and
per-process memory through psutil, recorded by a background thread while a benchmark runs; and
what NVML's readings need of a window (:mod:`~dpbench.sampler.energy`).

Torch-free on purpose: it runs in processes that never touch torch, and it must never
create a CUDA context (device mapping goes through NVML and ``CUDA_VISIBLE_DEVICES``).
May import: ``dpbench._atomic``, ``dpbench.schema`` (the saved identifiers it writes) and the
standard library, psutil and nvidia-ml-py only.
"""

from __future__ import annotations

from .base import BACKENDS, ResourceSampler
from .errors import SamplerWarning
from .nvml import UTILIZATION_CAVEAT
from .timeline import (
    MARK_DEVICE,
    METRIC_COLUMNS,
    SYSTEM_DEVICE,
    TIMELINE_COLUMNS,
    read_timeline,
    summarize_devices,
)

__all__ = [
    "ResourceSampler",
    "SamplerWarning",
    "BACKENDS",
    "UTILIZATION_CAVEAT",
    "TIMELINE_COLUMNS",
    "METRIC_COLUMNS",
    "SYSTEM_DEVICE",
    "MARK_DEVICE",
    "read_timeline",
    "summarize_devices",
]
