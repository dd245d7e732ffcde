"""Read the resource sampler's timeline CSVs that benchmarks reference, one per case and run.

A schema-2 case has one timeline per trial (``trials.timelines``); the report shows the first
trial's (``sampler.timeline`` points to it too), so every case of every run has a line while
the number of files read stays one per benchmark.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

__all__ = ["Timeline", "load_timelines", "timeline_path", "timeline_ref"]


@dataclass(kw_only=True)
class Timeline:
    run: str
    case: str
    name: str  # the benchmark
    file: str
    samples: pd.DataFrame  # time, device, utilization %, memory GiB
    marks: pd.DataFrame

    def totals(self) -> pd.DataFrame:
        """One line for the whole case: utilization averaged over the GPUs (the system CPU row
        where there is none), memory summed over the GPUs (the worker processes' RSS otherwise)."""
        data = self.samples
        gpus = data[data["device"].str.startswith("cuda")]
        util_rows = gpus if not gpus.empty else data[data["device"] == "cpu"]
        if not gpus.empty:
            mem_rows = gpus
        else:
            pids = data[data["device"].str.startswith("pid:")]
            mem_rows = pids if not pids.empty else data[data["device"] == "cpu"]
        util = util_rows.groupby("time")["utilization %"].mean()
        mem = mem_rows.groupby("time")["memory GiB"].sum(min_count=1)
        return pd.DataFrame({"utilization %": util, "memory GiB": mem}).sort_index()


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


def timeline_ref(row: pd.Series) -> str | None:
    """The timeline a benchmark row references: its first trial's, else ``sampler.timeline``."""
    refs = row.get("trial_timelines")
    for ref in refs if isinstance(refs, list) else []:
        if isinstance(ref, str) and ref:
            return ref
    ref = row.get("sampler.timeline")
    return ref if isinstance(ref, str) and ref else None


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


def load_timelines(rows: pd.DataFrame) -> tuple[list[Timeline], list[str]]:
    """The timeline of every benchmark row that has one, and notes on files that failed."""
    out: list[Timeline] = []
    notes: list[str] = []
    cache: dict[Path, tuple[pd.DataFrame, pd.DataFrame]] = {}  # cases published in several suites share one
    for _, row in rows.iterrows():
        relative = timeline_ref(row)
        if relative is None:
            continue
        path = timeline_path(str(row["run_path"]), relative)
        if path is None:
            notes.append(f"Timeline {relative!s} skipped: it must be a path inside the run's directory.")
            continue
        if path.suffix != ".csv":
            notes.append(f"Timeline {path.name} skipped: only CSV timelines are read.")
            continue
        if path not in cache:
            try:
                cache[path] = _tidy(pd.read_csv(path))
            except (OSError, ValueError, pd.errors.ParserError) as e:
                notes.append(f"Timeline {path.name} could not be read ({type(e).__name__}).")
                continue
        data, marks = cache[path]
        if data.empty:
            notes.append(f"Timeline {path.name} holds no samples.")
            continue
        workload = row["workload"] if isinstance(row["workload"], str) and row["workload"] else None
        label = row["case"] if "case" in row else row["label"]
        case = f"{workload}: {label}" if workload else str(label)
        names = row.get("benchmarks")  # a configuration several suites published: all its benchmarks
        name = " ".join(names) if isinstance(names, tuple) and names else str(row["name"])
        out.append(Timeline(run=str(row["run"]), case=case, name=name, file=path.name,
                            samples=data, marks=marks))
    return out, notes
