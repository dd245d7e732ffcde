"""The sampler's timeline format, shared by the sampler (writer) and the report (reader).

A timeline is a tidy table: one row per (sample time, device), plus one row per mark.
Column names are saved identifiers — the report reads them from CSV — so they live here
as constants and change only together with the report.

Device labels: ``"cpu"`` (system-wide CPU and memory), ``"pid:<pid>"`` (one watched
process together with its children), ``"cuda:<i>"`` (a GPU by the benchmark's CUDA index)
and ``"mark"`` (mark rows in the CSV only).

Pandas is imported inside the functions that build tables, so the sampling thread never
touches it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from typing import Any

from dpbench._atomic import atomic_write_text

from .clocks import clock_summary
from .energy import window_energy

__all__ = [
    "METRIC_COLUMNS",
    "TIMELINE_COLUMNS",
    "SYSTEM_DEVICE",
    "MARK_DEVICE",
    "pid_label",
    "cuda_label",
    "build_frame",
    "build_marks",
    "write_timeline",
    "read_timeline",
    "summarize_devices",
]

METRIC_COLUMNS: tuple[str, ...] = (
    "gpu_util_pct",  # NVML: percent of time any kernel ran (see nvml.UTILIZATION_CAVEAT)
    "mem_util_pct",  # NVML: percent of time device memory was read or written
    "mem_used_bytes",  # GPU: used (v2 excludes driver-reserved); cpu row: total − available
    "mem_reserved_bytes",  # GPU: driver-reserved (nvmlMemory_v2 only)
    "mem_total_bytes",
    "power_w",
    "energy_j",  # energy counter reading since the sampler started (J; a wrap undone, NaN after a reset)
    "temperature_c",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "throttle_reasons",  # NVML clock-event reasons bitmask (see sampler/clocks.py for the bits)
    "cpu_pct",  # cpu row: percent of all cores; pid rows: percent of one core (can pass 100)
    "rss_bytes",  # pid rows: RSS of the process plus its children
    "proc_gpu_mem_bytes",  # pid rows under NVML: GPU memory of the process and its children
)
TIMELINE_COLUMNS: tuple[str, ...] = ("time", "device", "mark") + METRIC_COLUMNS
# Timelines written before throttle_reasons existed: still readable (the column reads as NaN).
_V1_TIMELINE_COLUMNS: tuple[str, ...] = tuple(c for c in TIMELINE_COLUMNS if c != "throttle_reasons")
METRIC_INDEX = {name: i for i, name in enumerate(METRIC_COLUMNS)}

SYSTEM_DEVICE = "cpu"
MARK_DEVICE = "mark"

# Summary statistics per metric, by kind of row. "peak" and "max" are both the maximum;
# "peak" is used for memory so the key reads naturally (mem_used_bytes_peak).
_GPU_STATS = {
    "gpu_util_pct": ("mean", "max"),
    "mem_util_pct": ("mean", "max"),
    "mem_used_bytes": ("peak",),
    "mem_reserved_bytes": ("peak",),
    "mem_total_bytes": ("max",),
    "power_w": ("mean", "max"),
    "temperature_c": ("max",),
    "sm_clock_mhz": ("min", "mean", "max"),
    "mem_clock_mhz": ("min", "mean", "max"),
}
_CPU_STATS = {"cpu_pct": ("mean", "max"), "mem_used_bytes": ("peak",), "mem_total_bytes": ("max",)}
_PID_STATS = {"cpu_pct": ("mean", "max"), "rss_bytes": ("peak",), "proc_gpu_mem_bytes": ("peak",)}


def pid_label(pid: int) -> str:
    return f"pid:{pid}"


def cuda_label(index: int) -> str:
    return f"cuda:{index}"


def new_values() -> list[float]:
    """A metric vector with every metric unavailable (NaN)."""
    return [math.nan] * len(METRIC_COLUMNS)


def build_frame(rows: Iterable[tuple[float, str, Sequence[float]]]):
    """Rows of ``(time, device, metric values)`` → DataFrame with ``TIMELINE_COLUMNS``."""
    import pandas as pd

    rows = list(rows)
    data: dict[str, Any] = {
        "time": [r[0] for r in rows],
        "device": [r[1] for r in rows],
        "mark": [None] * len(rows),
    }
    for i, name in enumerate(METRIC_COLUMNS):
        data[name] = [r[2][i] for r in rows]
    frame = pd.DataFrame(data, columns=list(TIMELINE_COLUMNS))
    frame = frame.astype({"time": "float64", "device": "object", "mark": "object"})
    return frame.astype({name: "float64" for name in METRIC_COLUMNS})


def build_marks(marks: Iterable[tuple[float, str]]):
    import pandas as pd

    marks = list(marks)
    frame = pd.DataFrame({"time": [m[0] for m in marks], "mark": [m[1] for m in marks]}, columns=["time", "mark"])
    return frame.astype({"time": "float64", "mark": "object"})


def write_timeline(path: str | os.PathLike, frame, marks) -> Path:
    """Write samples and marks as one CSV, atomically (temp file + ``os.replace``).

    A reader never sees a half-written file: the CSV is written next to its destination
    and renamed over it only once complete.
    """
    import pandas as pd

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mark_rows = pd.DataFrame({"time": marks["time"], "device": MARK_DEVICE, "mark": marks["mark"]})
    table = pd.concat([frame, mark_rows.reindex(columns=list(TIMELINE_COLUMNS))], ignore_index=True)
    # Stable sort keeps a mark after the samples taken at the same instant.
    table = table.sort_values("time", kind="stable")
    atomic_write_text(path, table.to_csv(index=False, na_rep="", lineterminator="\n"))
    return path


def read_timeline(path: str | os.PathLike):
    """Read a timeline CSV → ``(frame, marks)`` shaped like ``frame()`` and ``marks()``."""
    import pandas as pd

    # keep_default_na=False: a mark labelled "NA" or "null" stays a label.
    table = pd.read_csv(path, dtype=str, keep_default_na=False)
    found = tuple(table.columns)
    if found == _V1_TIMELINE_COLUMNS:
        table["throttle_reasons"] = ""
    elif found != TIMELINE_COLUMNS:
        raise ValueError(
            f"{path}: not a dpbench sampler timeline; expected columns {list(TIMELINE_COLUMNS)}, found {list(found)}"
        )
    is_mark = table["device"] == MARK_DEVICE
    samples = table[~is_mark].reset_index(drop=True)
    frame = pd.DataFrame({"time": pd.to_numeric(samples["time"]), "device": samples["device"], "mark": None})
    for name in METRIC_COLUMNS:
        frame[name] = pd.to_numeric(samples[name].replace("", math.nan))
    frame = frame.astype({"time": "float64", "device": "object", "mark": "object"})
    frame = frame.astype({name: "float64" for name in METRIC_COLUMNS})
    marks = build_marks(zip(pd.to_numeric(table.loc[is_mark, "time"]), table.loc[is_mark, "mark"]))
    return frame, marks


def _plain(value: Any, *, integer: bool = False) -> Any:
    """A JSON-safe scalar: NaN/None → None, numpy scalars → int/float."""
    if value is None:
        return None
    value = float(value)
    if math.isnan(value):
        return None
    return int(round(value)) if integer else value


def _stats_for(sub, stats: dict[str, tuple[str, ...]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for metric, kinds in stats.items():
        column = sub[metric].dropna()
        integer = metric.endswith("_bytes")
        for kind in kinds:
            if column.empty:
                out[f"{metric}_{kind}"] = None
            elif kind == "mean":
                out[f"{metric}_{kind}"] = _plain(column.mean())
            elif kind == "min":
                out[f"{metric}_{kind}"] = _plain(column.min(), integer=integer)
            else:  # "max" and "peak"
                out[f"{metric}_{kind}"] = _plain(column.max(), integer=integer)
    return out


def summarize_devices(frame, *, energy_resets: Collection[str] = ()) -> dict[str, dict[str, Any]]:
    """Per-device summary of a timeline frame, keyed by device label.

    GPU rows get mean/max utilization, peak memory, energy (difference of the first and
    last counter readings, not an integral of power samples; absent with the reason where it
    cannot be read, :func:`dpbench.sampler.energy.window_energy`; ``energy_resets``: the GPUs
    whose counter reset during the recording), mean/max power, max
    temperature, min/mean/max clocks and the clock facts of :func:`clocks.clock_summary`
    (throttle reasons seen, busy SM clock spread, ``clocks_locked``); the ``cpu`` row gets
    CPU % and system memory; ``pid:`` rows get CPU %, peak RSS and peak per-process GPU
    memory. Values are plain JSON types.
    """
    out: dict[str, dict[str, Any]] = {}
    for label, sub in frame.groupby("device", sort=False):
        entry: dict[str, Any] = {"samples": int(len(sub))}
        if label.startswith("cuda:"):
            entry.update(_stats_for(sub, _GPU_STATS))
            energy = window_energy(sub["time"].tolist(), sub["energy_j"].tolist(), reset=label in energy_resets)
            entry.update({key: _plain(value) if isinstance(value, float) else value for key, value in energy.items()})
            entry.update(clock_summary(sub["sm_clock_mhz"].tolist(), sub["throttle_reasons"].tolist()))
        elif label == SYSTEM_DEVICE:
            entry.update(_stats_for(sub, _CPU_STATS))
        else:
            entry.update(_stats_for(sub, _PID_STATS))
            entry["first_time"] = _plain(sub["time"].min())
            entry["last_time"] = _plain(sub["time"].max())
        out[str(label)] = entry
    return out
