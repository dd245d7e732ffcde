"""GPU clock behaviour over a recording: throttle reasons, clock spread, "locked" and warnings.

A GPU whose SM clock floats (boost rising and falling with power and temperature) or is held
down (power cap, thermal slowdown) times the same code differently from one trial to the
next. The summary records what NVML saw so a result can be judged, and warns in one line
when the clocks were not steady.

Per sample, NVML's clock-event (formerly "throttle") reasons are a bitmask, stored as the
``throttle_reasons`` timeline column. Two reasons are not a slowdown of the benchmark:
``gpu_idle`` (nothing was running: clocks drop by design between calls) and
``applications_clocks_setting`` (clocks are held where the administrator set them, which is
how locked clocks show up). Samples flagged ``gpu_idle`` are left out of the clock spread.

``clocks_locked`` is best effort, because NVML has no "locked" query for clocks set with
``nvidia-smi -lgc``: True when, over at least ``MIN_BUSY_SAMPLES`` busy samples, the SM
clock stayed within ``LOCKED_SPREAD_PCT`` and no reason other than the two above appeared —
the clocks *behaved* as if locked (they may also simply have sat at maximum boost); False
when they varied more or a slowdown reason appeared; None when there were too few busy
samples (or no clock readings) to tell. ``clocks_locked_basis`` says which and why.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "REASON_BITS",
    "BENIGN_REASONS",
    "LOCKED_SPREAD_PCT",
    "FLOAT_WARN_PCT",
    "MIN_BUSY_SAMPLES",
    "decode_reasons",
    "clock_summary",
    "clock_warnings",
]

# NVML's nvmlClocksEventReason* / nvmlClocksThrottleReason* bits (same values in both APIs).
REASON_BITS: dict[int, str] = {
    0x001: "gpu_idle",
    0x002: "applications_clocks_setting",
    0x004: "sw_power_cap",
    0x008: "hw_slowdown",
    0x010: "sync_boost",
    0x020: "sw_thermal",
    0x040: "hw_thermal",
    0x080: "hw_power_brake",
    0x100: "display_clocks",
    0x200: "board_limit",
    0x400: "reliability",
}
BENIGN_REASONS = frozenset({"gpu_idle", "applications_clocks_setting"})
_IDLE_BIT = 0x001

LOCKED_SPREAD_PCT = 1.0  # SM clock within this (max − min) / max while busy → behaves as locked
FLOAT_WARN_PCT = 5.0  # more than this while busy → a clock_warning
MIN_BUSY_SAMPLES = 3


def decode_reasons(mask: int) -> list[str]:
    """Bitmask → reason names in bit order; unknown bits as ``unknown_0x…``."""
    mask = int(mask)
    names = [name for bit, name in REASON_BITS.items() if mask & bit]
    rest = mask & ~sum(REASON_BITS)
    bit = 1
    while rest:
        if rest & bit:
            names.append(f"unknown_0x{bit:x}")
            rest &= ~bit
        bit <<= 1
    return names


def _spread_pct(values: list[float]) -> float | None:
    if not values or max(values) <= 0:
        return None
    return (max(values) - min(values)) / max(values) * 100.0


def clock_summary(sm_clock: Iterable[float], reasons: Iterable[float]) -> dict[str, Any]:
    """One GPU's clock facts from its samples (NaN = not read), JSON-safe."""
    pairs = list(zip(sm_clock, reasons))
    read = [int(r) for _, r in pairs if not math.isnan(r)]
    union = 0
    for r in read:
        union |= r
    have_reasons = bool(read)
    # Idle samples are left out: clocks drop by design when nothing runs.
    busy_pairs = [(c, r) for c, r in pairs if math.isnan(r) or not int(r) & _IDLE_BIT]
    busy = [c for c, _ in busy_pairs if not math.isnan(c)]
    busy_union = 0
    for _, r in busy_pairs:
        if not math.isnan(r):
            busy_union |= int(r)
    slowdowns = [n for n in decode_reasons(busy_union) if n not in BENIGN_REASONS]
    spread = _spread_pct(busy)
    if len(busy) < MIN_BUSY_SAMPLES or spread is None:
        locked, basis = None, f"{len(busy)} busy SM clock sample(s): too few to tell (need {MIN_BUSY_SAMPLES})"
    elif spread > LOCKED_SPREAD_PCT:
        locked, basis = False, f"SM clock varied {spread:.1f}% while busy ({min(busy):.0f}-{max(busy):.0f} MHz)"
    elif slowdowns:
        locked, basis = False, f"slowdown reason(s) while busy: {', '.join(slowdowns)}"
    else:
        reasons_note = "" if have_reasons else " (throttle reasons not readable)"
        locked, basis = (
            True,
            (
                f"SM clock within {LOCKED_SPREAD_PCT:g}% ({min(busy):.0f}-{max(busy):.0f} MHz) "
                f"over {len(busy)} busy samples, no slowdown reason{reasons_note}"
            ),
        )
    return {
        "throttle_reasons": decode_reasons(union) if have_reasons else None,
        "sm_clock_busy_samples": len(busy),
        "sm_clock_busy_spread_pct": spread,
        "clocks_locked": locked,
        "clocks_locked_basis": basis,
    }


def clock_warnings(devices: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One line per GPU problem: SM clock floating > FLOAT_WARN_PCT while busy, slowdown reasons."""
    out: list[str] = []
    for label, info in devices.items():
        if not label.startswith("cuda:"):
            continue
        spread = info.get("sm_clock_busy_spread_pct")
        if spread is not None and spread > FLOAT_WARN_PCT:
            out.append(
                f"{label}: SM clock floated {spread:.1f}% (max - min over max) across "
                f"{info.get('sm_clock_busy_samples')} busy samples; lock the clocks (nvidia-smi -lgc) "
                "for steadier timings"
            )
        slowdowns = [n for n in info.get("throttle_reasons") or [] if n not in BENIGN_REASONS]
        if slowdowns:
            out.append(f"{label}: clock slowdown reason(s) seen: {', '.join(slowdowns)}")
    return out
