"""How long NVML's readings take to mean something, and GPU energy read off the counter.

**The window a GPU's readings need.** NVML's utilization is the share of time a kernel ran over
its own averaging period, 1/6 s to 1 s depending on the product; a reading taken less than one
period after a window opens still averages what ran before it. The sampler reads every
``interval`` seconds (0.25 s when it shares its cores with the workers). So a window holds
``MIN_INSIDE_READINGS`` readings whose whole averaging period lies inside it only from
``UTILIZATION_PERIOD_MAX_S + (MIN_INSIDE_READINGS - 1) × interval`` on (2.0 s at 0.25 s): five
readings span a second period, so the mean and the maximum rest on two periods, not one reading
counted five times. The energy counter moves every 20–100 ms on recent GPUs; each end of a window
is stale by up to one update, so ``ENERGY_UPDATES`` updates (2.0 s) keep that under a tenth of the
window. :func:`min_gpu_window_s` is the larger of the two.

**Energy over a window** is the counter's difference between the window's first and last
readings (mJ since the driver loaded; Zeus's method), never an integral of power samples.
:class:`EnergyCounter` follows one GPU's counter through a recording: a reading below the last one
by no more than a board can draw is the 64-bit counter wrapping and is undone; any other step back,
or a jump beyond what a board can draw, is a reset, and the recording's energy is absent from then
on. :func:`window_energy` reads the result: absent (:class:`dpbench.schema.EnergyGap`) when there is
no counter, the window is shorter than the counter needs, the counter reset, or it stood still for
``STALL_S`` (a GPU draws tens of watts idle: a counter that does not move is not reading 0 J).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dpbench.schema import EnergyGap

__all__ = [
    "COUNTER_MODULUS",
    "ENERGY_UPDATE_PERIOD_MAX_S",
    "ENERGY_UPDATES",
    "MAX_BOARD_W",
    "MIN_INSIDE_READINGS",
    "STALL_S",
    "UTILIZATION_PERIOD_MAX_S",
    "EnergyCounter",
    "min_energy_window_s",
    "min_gpu_window_s",
    "window_energy",
]

UTILIZATION_PERIOD_MAX_S = 1.0
"""NVML's utilization averaging period at its longest (1/6 s to 1 s depending on the product)."""
MIN_INSIDE_READINGS = 5
"""Utilization readings whose whole averaging period lies inside the window: over a second period at 0.25 s."""
ENERGY_UPDATE_PERIOD_MAX_S = 0.1
"""The energy counter's update period at its slowest on recent GPUs (20–100 ms)."""
ENERGY_UPDATES = 20
"""Counter updates a window must span: each end stale by at most one, so at most a tenth of the window."""
STALL_S = 1.0
"""Ten of the counter's slowest updates without a change: stalled (no working GPU draws 0 W)."""
MAX_BOARD_W = 5000.0
"""More than any one GPU board draws: a counter step implying more is a reset, not energy."""
COUNTER_MODULUS = 1 << 64
"""nvmlDeviceGetTotalEnergyConsumption returns an unsigned long long (mJ): it wraps here."""


def min_energy_window_s() -> float:
    """The shortest window whose counter difference is read: ``ENERGY_UPDATES`` updates (2.0 s)."""
    return ENERGY_UPDATES * ENERGY_UPDATE_PERIOD_MAX_S


def min_gpu_window_s(interval: float) -> float:
    """The shortest window whose NVML readings mean something at a sampling ``interval`` (seconds):
    ``MIN_INSIDE_READINGS`` utilization readings whose averaging period lies inside it, and the
    energy counter's ``ENERGY_UPDATES`` updates (2.0 s at the shared-core 0.25 s)."""
    if not interval > 0 or not math.isfinite(interval):
        raise ValueError(f"interval: expected a positive number of seconds, found {interval!r}")
    readings = UTILIZATION_PERIOD_MAX_S + (MIN_INSIDE_READINGS - 1) * interval
    return max(readings, min_energy_window_s())


@dataclass
class EnergyCounter:
    """One GPU's energy counter over a recording (the sampler thread's own state)."""

    total_mj: int = 0
    """mJ counted since the first reading, wraps undone."""
    last_mj: int | None = None
    last_time: float = 0.0
    reset: dict[str, float] | None = None
    """Once the counter reset: ``at_s``, ``from_mj``, ``to_mj``; nothing is counted after it."""

    def read(self, raw: Any, now: float) -> float | None:
        """Joules counted since the first reading (0.0 for that one), or None from a reset on."""
        value = int(raw)
        if self.reset is not None:
            return None
        if self.last_mj is None:
            self.last_mj, self.last_time = value, now
            return 0.0
        step = (value - self.last_mj) % COUNTER_MODULUS  # a wrap past 2**64 is a small step forward
        # A step of the counter lumps one update's energy, so the bound spans at least a second.
        most = MAX_BOARD_W * 1000.0 * max(now - self.last_time, 1.0)
        if step > most:
            self.reset = {"at_s": now, "from_mj": float(self.last_mj), "to_mj": float(value)}
            return None
        self.total_mj += step
        self.last_mj, self.last_time = value, now
        return self.total_mj / 1000.0


def _held_s(pairs: Sequence[tuple[float, float]]) -> float:
    """The longest time the counter read one value (from its first reading of it to its last)."""
    longest, since = 0.0, 0
    for i in range(1, len(pairs)):
        if pairs[i][1] != pairs[since][1]:
            since = i
        longest = max(longest, pairs[i][0] - pairs[since][0])
    return longest


def window_energy(times: Sequence[float], joules: Sequence[float], *, reset: bool = False) -> dict[str, Any]:
    """A GPU's energy over its sampled window, from the timeline's ``time`` and ``energy_j`` (NaN: not
    read): ``energy_j`` (None when absent), ``energy_window_s`` (first to last reading),
    ``energy_absent`` (a :class:`~dpbench.schema.EnergyGap` value, or None) and ``energy_held_s``
    (the longest the counter stood still)."""
    pairs = [(float(t), float(j)) for t, j in zip(times, joules) if j == j]
    window = pairs[-1][0] - pairs[0][0] if pairs else None
    held = _held_s(pairs) if pairs else None
    out: dict[str, Any] = {"energy_j": None, "energy_window_s": window, "energy_absent": None, "energy_held_s": held}
    if reset:
        out["energy_absent"] = EnergyGap.RESET.value
    elif not pairs:
        out["energy_absent"] = EnergyGap.NO_COUNTER.value
    elif window < min_energy_window_s():
        out["energy_absent"] = EnergyGap.SHORT_WINDOW.value
    elif held >= STALL_S:
        out["energy_absent"] = EnergyGap.STALLED.value
    else:
        out["energy_j"] = pairs[-1][1] - pairs[0][1]
    return out
