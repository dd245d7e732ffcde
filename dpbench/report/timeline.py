"""Read the resource sampler's timeline CSVs referenced by ``extra_info.sampler.timeline``."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

__all__ = ["MAX_TIMELINES", "load_timelines", "timeline_path"]

MAX_TIMELINES = 8


def timeline_path(run_path: str, relative: object) -> Path | None:
    """The timeline file, or None when the reference is unusable.

    The path comes from a results file, so it is confined to the run's directory: a crafted
    ``../../etc/passwd`` must not end up plotted into a report someone shares.
    """
    if not isinstance(relative, str) or not relative:
        return None
    base = Path(run_path).resolve().parent
    candidate = (base / relative).resolve()
    if not candidate.is_relative_to(base):
        return None
    return candidate


def _tidy(raw: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    raw = raw.copy()
    for col in ("time", "gpu_util_pct", "cpu_pct", "mem_used_bytes", "rss_bytes"):
        raw[col] = pd.to_numeric(raw[col], errors="coerce") if col in raw else float("nan")
    device = raw["device"].astype(str) if "device" in raw else pd.Series("?", index=raw.index)
    marks = raw[device == "mark"][["time"]].dropna()
    data = raw[device != "mark"].copy()
    data["device"] = device[device != "mark"]
    # One utilization and one memory axis for every device kind: GPUs report NVML's numbers,
    # the host and worker processes psutil's.
    data["utilization %"] = data["gpu_util_pct"].fillna(data["cpu_pct"])
    data["memory GiB"] = data["mem_used_bytes"].fillna(data["rss_bytes"]) / 2**30
    data = data[data["time"].notna()]
    return data[["time", "device", "utilization %", "memory GiB"]], marks


def load_timelines(frame: pd.DataFrame) -> tuple[list[tuple[str, pd.DataFrame, pd.DataFrame]], list[str]]:
    """``(title, samples, marks)`` per distinct timeline file, and notes on files that failed."""
    if "sampler.timeline" not in frame:
        return [], []
    out: list[tuple[str, pd.DataFrame, pd.DataFrame]] = []
    notes: list[str] = []
    refs = frame[frame["sampler.timeline"].notna()]
    for (run_path, relative), group in refs.groupby(["run_path", "sampler.timeline"], sort=False):
        path = timeline_path(run_path, relative)
        if path is None:
            notes.append(f"Timeline {relative!s} skipped: it must be a path inside the run's directory.")
            continue
        if path.suffix != ".csv":
            notes.append(f"Timeline {path.name} skipped: only CSV timelines are read.")
            continue
        try:
            data, marks = _tidy(pd.read_csv(path))
        except (OSError, ValueError, pd.errors.ParserError) as e:
            notes.append(f"Timeline {path.name} could not be read ({type(e).__name__}).")
            continue
        if data.empty:
            notes.append(f"Timeline {path.name} holds no samples.")
            continue
        workload = group["workload"].fillna("").astype(str)
        labels = list(dict.fromkeys((workload + ": ").where(workload != "", "") + group["label"].astype(str)))
        run = str(group["run"].iloc[0])
        title = f"{run} · {labels[0]}" if len(labels) == 1 else f"{run} · {path.name} ({len(labels)} cases)"
        out.append((title, data, marks))
    return out, notes
