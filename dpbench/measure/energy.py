"""Energy per sample and the GPU window of a training case, from what its trials' samplers read.

Energy is measured as Zeus measures it: the GPU's total-energy counter's difference over the trial's
timed window — the sampler's window, which holds the timed rounds and nothing else — never power ×
time (:func:`dpbench.sampler.energy.window_energy`: a wrap undone; a reset, a stall or a window
shorter than the counter needs absent with the reason). Each trial's record (:func:`trial_energy`) is
computed where the trial ran and kept on :class:`dpbench.measure.cases.TrainingDetail`; the case's
``extra_info["energy"]`` (:func:`energy_info`) is the median over the trials kept with its spread,
beside the idle baseline the session measured once (:func:`idle_power`). A GPU two ranks share is
counted once; on CPU, where there is no counter, every number is absent with the reason, never 0.

Nothing here imports torch.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from dpbench.schema import EnergyGap
from dpbench.stats import coefficient_of_variation, median, or_none

__all__ = ["IDLE_INTERVAL_S", "energy_info", "idle_power", "trial_energy", "window_info"]

IDLE_INTERVAL_S = 0.25
"""The idle baseline's sampling interval: it reads the counter, which needs no finer grid."""


def _gpus(summary: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    devices = (summary or {}).get("devices") or {}
    return {label: info for label, info in devices.items() if str(label).startswith("cuda:")}


def trial_energy(summary: Mapping[str, Any] | None, *, samples: int, nodes: int = 1) -> dict[str, Any]:
    """One trial's energy from its sampler ``summary`` (:meth:`ResourceSampler.summary`) and the
    ``samples`` its timed rounds trained: ``joules`` (summed over the case's GPUs, each once),
    ``window_s``, ``samples``, ``j_per_sample``, ``avg_w``, ``devices``, and where it cannot be read
    ``absent`` (an :class:`~dpbench.schema.EnergyGap` value; the numbers stay None) with
    ``absent_device``, ``held_s`` and ``needed_s``, what its words are made of."""
    from dpbench.sampler.energy import min_energy_window_s

    gpus = _gpus(summary)
    out: dict[str, Any] = {
        "joules": None,
        "window_s": None,
        "samples": samples,
        "j_per_sample": None,
        "avg_w": None,
        "devices": sorted(gpus),
        "absent": None,
        "absent_device": None,
        "held_s": None,
        "needed_s": min_energy_window_s(),
    }
    if nodes > 1:  # the sampler reads this host's GPUs only
        out["absent"] = EnergyGap.OTHER_NODES.value
        return out
    if not gpus:
        out["absent"] = EnergyGap.NO_COUNTER.value
        return out
    for label, info in gpus.items():
        absent = info.get("energy_absent") or (None if info.get("energy_j") is not None else EnergyGap.NO_COUNTER.value)
        if absent is not None:
            out.update(
                absent=absent,
                absent_device=label,
                window_s=info.get("energy_window_s"),
                held_s=info.get("energy_held_s"),
            )
            return out
    joules = sum(float(info["energy_j"]) for info in gpus.values())
    window = max(float(info["energy_window_s"]) for info in gpus.values())
    out.update(joules=joules, window_s=window, avg_w=joules / window if window > 0 else None)
    out["j_per_sample"] = joules / samples if samples > 0 else None
    return out


def idle_power(*, seconds: float, devices: Sequence[str] | None = None, nvml: Any = None) -> dict[str, Any]:
    """The GPUs' draw with nothing running, read once per session over ``seconds``: ``devices`` (label
    → ``w`` and ``absent``), ``window_s``. Where NVML cannot be used: no device, ``absent`` says why."""
    from dpbench.sampler import ResourceSampler

    sampler = ResourceSampler(IDLE_INTERVAL_S, devices=devices, nvml=nvml)
    if sampler.backend != "nvml":
        return {"devices": {}, "window_s": None, "absent": EnergyGap.NO_COUNTER.value}
    with sampler:
        time.sleep(seconds)
    out: dict[str, Any] = {}
    for label, info in _gpus(sampler.summary()).items():
        record = trial_energy({"devices": {label: info}}, samples=0)
        out[label] = {"w": record["avg_w"], **{k: record[k] for k in ("absent", "window_s", "held_s", "needed_s")}}
    return {"devices": out, "window_s": seconds, "absent": None}


def _idle_for(devices: Sequence[str], idle: Mapping[str, Any] | None) -> tuple[float | None, str | None]:
    """The session's idle draw summed over ``devices`` (None, with why, where any is unknown)."""
    if idle is None:
        return None, EnergyGap.NO_COUNTER.value
    known = idle.get("devices") or {}
    if not devices or idle.get("absent"):
        return None, idle.get("absent") or EnergyGap.NO_COUNTER.value
    total = 0.0
    for label in devices:
        entry = known.get(label) or {}
        if entry.get("w") is None:
            return None, entry.get("absent") or EnergyGap.NO_COUNTER.value
        total += float(entry["w"])
    return total, None


def energy_info(
    records: Sequence[Mapping[str, Any] | None], *, left_out: Sequence[bool], idle: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """``extra_info["energy"]`` of a training case from each trial slot's record (:func:`trial_energy`;
    None for a trial that records none), the slots every estimate leaves out, and the session's idle
    baseline (:func:`idle_power`; None where it measured none): medians over the trials kept that read
    the counter, their between-trial CV, and why where none did. None for a case whose trials record
    no energy (a convergence case: its sampled window holds the evaluations too)."""
    if all(r is None for r in records):
        return None
    records = [dict(r) if r is not None else None for r in records]
    kept = [r for r, out in zip(records, list(left_out) + [False] * len(records)) if r is not None and not out]
    read = [r for r in kept if r.get("j_per_sample") is not None]
    per_sample = [float(r["j_per_sample"]) for r in read]
    watts = [float(r["avg_w"]) for r in read if r.get("avg_w") is not None]
    devices = next((r["devices"] for r in kept if r.get("devices")), [])
    idle_w, idle_absent = _idle_for(devices, idle)
    absent = None if read else next((r["absent"] for r in kept if r.get("absent")), EnergyGap.NO_COUNTER.value)
    return {
        "j_per_sample": median(per_sample) if per_sample else None,
        "j_per_sample_cv": or_none(coefficient_of_variation(per_sample)),
        "avg_w": median(watts) if watts else None,
        "avg_w_cv": or_none(coefficient_of_variation(watts)),
        "trials_read": len(read),
        "idle_w": idle_w,
        "idle_absent": idle_absent,
        "absent": absent,
        "devices": list(devices),
        "trials": records,
    }


def window_info(summaries: Sequence[Mapping[str, Any] | None]) -> dict[str, Any] | None:
    """``extra_info["sampled_window"]``: per trial, how long its GPUs were sampled and whether that was
    shorter than NVML's readings need (``gpu_window`` of each summary); None where no GPU was sampled."""
    windows = [(s or {}).get("gpu_window") for s in summaries]
    if not any(windows):
        return None
    return {
        "needed_s": max(w["needed_s"] for w in windows if w),
        "window_s": [w["window_s"] if w else None for w in windows],
        "short": [bool(w and w["short"]) for w in windows],
    }
