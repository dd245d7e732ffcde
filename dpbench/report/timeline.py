"""Read the resource sampler's timeline CSVs that benchmarks reference, one per case and run.

A schema-2 case has one timeline per trial (``trials.timelines``); the report shows the first
trial's (``sampler.timeline`` points to it too), so every case of every run has a line while
the number of files read stays one per benchmark.
"""

from __future__ import annotations

import csv
import math
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
        devices = set(data["device"])
        gpus = {d for d in devices if d.startswith("cuda")}
        util_devices = gpus or {"cpu"}
        mem_devices = gpus or ({d for d in devices if d.startswith("pid:")} or {"cpu"})
        # Plain loops over a few hundred samples: a pandas groupby per timeline cost more than
        # reading the file, once every case of every suite records one.
        util: dict[float, list[float]] = {}
        mem: dict[float, list[float]] = {}
        for t, device, u, m in zip(data["time"], data["device"], data["utilization %"], data["memory GiB"]):
            if device in util_devices and u == u:
                util.setdefault(t, []).append(u)
            if device in mem_devices and m == m:
                mem.setdefault(t, []).append(m)
        times = sorted(set(util) | set(mem))
        return pd.DataFrame(
            {
                "utilization %": [sum(util[t]) / len(util[t]) if t in util else math.nan for t in times],
                "memory GiB": [sum(mem[t]) if t in mem else math.nan for t in times],
            },
            index=pd.Index(times, name="time"),
        )


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


def _number(text: str | None) -> float:
    try:
        value = float(text) if text not in (None, "") else math.nan
    except ValueError:
        return math.nan
    return value if math.isfinite(value) else math.nan


def _read(path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The sampler's CSV as (samples: time, device, utilization %, memory GiB; marks: time).

    Read with the csv module: pandas' reader and the column conversions cost ten times more on
    these small files, and a report reads one per configuration."""
    times, devices, utils, mems, marks = [], [], [], [], []
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames is None or "time" not in reader.fieldnames:
            raise ValueError("no time column")
        for row in reader:
            t = _number(row.get("time"))
            device = str(row.get("device") or "?")
            if t != t:
                continue
            if device == "mark":
                marks.append(t)
                continue
            # One utilization and one memory axis for every device kind: GPUs report NVML's
            # numbers, the host and worker processes psutil's.
            util = _number(row.get("gpu_util_pct"))
            mem = _number(row.get("mem_used_bytes"))
            times.append(t)
            devices.append(device)
            utils.append(util if util == util else _number(row.get("cpu_pct")))
            mems.append((mem if mem == mem else _number(row.get("rss_bytes"))) / 2**30)
    samples = pd.DataFrame({"time": times, "device": devices, "utilization %": utils, "memory GiB": mems})
    return samples, pd.DataFrame({"time": marks})


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
                cache[path] = _read(path)
            except (OSError, ValueError, UnicodeDecodeError, csv.Error) as e:
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
        out.append(Timeline(run=str(row["run"]), case=case, name=name, file=path.name, samples=data, marks=marks))
    return out, notes
