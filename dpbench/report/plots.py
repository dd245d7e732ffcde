"""The report's figures: one function per plot, each returning a :class:`Section`.

Each section carries the figure as a base64 PNG (the report must open offline, so nothing
is linked), the table of numbers behind it, and a note instead of the figure when the runs
hold no data for it. Figures are built on ``matplotlib.figure.Figure`` objects, never through
pyplot's global state, so nothing leaks between reports.
"""
from __future__ import annotations

import base64
import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import matplotlib
import matplotlib.ticker
import pandas as pd
import seaborn as sns
# Figures are plain Figure objects saved straight to PNG (Agg), never shown through pyplot: the
# report renders headless on CI, and importing it leaves a notebook's backend untouched.
from matplotlib.figure import Figure

from dpbench.report import timeline
from dpbench.report.units import fmt_bytes, fmt_num, fmt_seconds
from dpbench.schema import Phase

__all__ = ["Section", "Table", "PLOTS", "build_sections", "figure_png"]

MAX_CASES = 60  # rows in one distribution/phase/memory figure before it stops being readable


@dataclass
class Table:
    columns: list[str]
    rows: list[list[str]]


@dataclass
class Section:
    key: str
    title: str
    description: str
    image_png_b64: str | None = None
    note: str | None = None
    tables: list[Table] = field(default_factory=list)


def figure_png(fig: Figure) -> str:
    """The figure as base64 PNG text for a ``data:`` URI."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=96, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _figure(width: float, height: float) -> Figure:
    return Figure(figsize=(width, max(2.5, min(height, 40.0))), layout="constrained")


def _numeric(frame: pd.DataFrame, column: str) -> pd.Series:
    """A column as floats; anything not a finite number (text, lists, ±inf) becomes NaN."""
    if column not in frame:
        return pd.Series(math.nan, index=frame.index, dtype=float)
    return _finite(pd.to_numeric(frame[column], errors="coerce"))


def _finite(values: pd.Series) -> pd.Series:
    values = values.astype(float)
    return values.where(values.abs() < 1e300)  # beyond this, axis arithmetic overflows to inf


def _case(frame: pd.DataFrame, *, with_run: bool = True) -> pd.Series:
    """``workload: label``, prefixed by the run when several runs share a figure without hue."""
    workload = frame["workload"].fillna("").astype(str)
    case = (workload + ": ").where(workload != "", "") + frame["label"].astype(str)
    if with_run and frame["run"].nunique() > 1:
        case = frame["run"].astype(str) + " · " + case
    return case


def _by_case(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows ordered so one case's runs sit next to each other."""
    key = _case(frame, with_run=False)
    first = {c: i for i, c in enumerate(dict.fromkeys(key))}
    return frame.assign(_order=key.map(first)).sort_values(["_order", "run"], kind="stable").drop(columns="_order")


def _plain_log_ticks(axis) -> None:
    # text.parse_math is off (see build_sections), so the default "$10^{1}$" labels would show raw.
    axis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(matplotlib.ticker.NullFormatter())


def _hue(frame: pd.DataFrame) -> str | None:
    return "run" if frame["run"].nunique() > 1 else None


def _training(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["kind"].fillna("training") != "collective"]


# ---------------------------------------------------------------- 1. throughput
def throughput(frame: pd.DataFrame) -> Section:
    sec = Section("throughput", "Throughput per strategy",
                  "Samples per second of each round (mean with 95% bootstrap CI), per workload. Higher is better.")
    rows = _training(frame).copy()
    rows["global_batch"] = _numeric(rows, "global_batch")
    rows = rows[rows["global_batch"].notna() & rows["workload"].notna()]
    if rows.empty:
        sec.note = "No training benchmarks with a workload and global batch in these runs."
        return sec
    long = rows[["run", "workload", "label", "global_batch", "step_samples"]].explode("step_samples")
    long = long[long["step_samples"].notna()]
    long["samples/s"] = _finite(long["global_batch"] / long["step_samples"].astype(float))
    long = long[long["samples/s"].notna()]
    if long.empty:  # raw samples not saved: one bar per case from the summary number
        long = rows.assign(**{"samples/s": _numeric(rows, "samples_per_s")})
        long = long[long["samples/s"].notna()]
    if long.empty:
        sec.note = "No finite throughput numbers in these runs."
        return sec
    workloads = sorted(long["workload"].astype(str).unique())
    n_runs = max(1, rows["run"].nunique())
    # Each workload's panel grows with its bars, so one-case panels are not squashed.
    heights = [0.9 + 0.3 * n_runs * long[long["workload"] == w]["label"].nunique() for w in workloads]
    fig = _figure(10, sum(heights))
    axes = fig.subplots(len(workloads), 1, squeeze=False, gridspec_kw={"height_ratios": heights})[:, 0]
    for ax, workload in zip(axes, workloads):
        data = long[long["workload"] == workload]
        sns.barplot(data=data, y="label", x="samples/s", hue=_hue(rows), errorbar=("ci", 95),
                    seed=0, ax=ax)
        ax.set_title(f"workload: {workload}")
        ax.set_ylabel("")
    sec.image_png_b64 = figure_png(fig)
    rows["median samples/s"] = rows["global_batch"] / _numeric(rows, "step_time_median")
    single = rows[rows["strategy"] == "single"].groupby(["run", "workload"])["median samples/s"].max()
    table = []
    for _, r in rows.sort_values(["workload", "run", "median samples/s"], ascending=[True, True, False]).iterrows():
        base = single.get((r["run"], r["workload"]), math.nan)
        table.append([str(r["run"]), str(r["workload"]), str(r["label"]), fmt_num(r["median samples/s"]),
                      fmt_num(r["median samples/s"] / base, suffix="×")])
    sec.tables.append(Table(["run", "workload", "case", "samples/s (median round)", "vs single"], table))
    return sec


# ---------------------------------------------------------------- 2. scaling
def scaling(frame: pd.DataFrame) -> Section:
    sec = Section("scaling", "Scaling efficiency",
                  "Throughput at world size N divided by N × the single-device throughput of the same run. "
                  "The dashed line is ideal linear scaling.")
    rows = _training(frame).copy()
    rows["efficiency"] = _numeric(rows, "scaling_efficiency")
    rows["world_size"] = _numeric(rows, "world_size")
    rows = rows[rows["efficiency"].notna() & rows["world_size"].notna()]
    if rows.empty:
        sec.note = "No scaling benchmarks (extra_info.scaling_efficiency) in these runs."
        return sec
    rows["series"] = rows["workload"].fillna("").astype(str) + ": " + rows["strategy_label"].astype(str)
    fig = _figure(9, 4.5)
    ax = fig.subplots()
    sns.lineplot(data=rows.sort_values("world_size"), x="world_size", y="efficiency", hue="series",
                 style=_hue(rows), markers=True, ax=ax)
    ax.axhline(1.0, linestyle="--", color="black", linewidth=1, label="ideal")
    ax.set_xticks(sorted(rows["world_size"].unique()))
    ax.set_ylim(bottom=0)
    ax.set_xlabel("world size")
    ax.legend(loc="best", fontsize="small")
    sec.image_png_b64 = figure_png(fig)
    table = [[str(r["run"]), str(r["workload"]), str(r["strategy_label"]), fmt_num(r["world_size"]),
              fmt_num(_numeric(rows.loc[[i]], "samples_per_s").iloc[0]),
              fmt_num(_numeric(rows.loc[[i]], "baseline_samples_per_s").iloc[0]), f"{r['efficiency']:.1%}"]
             for i, r in rows.sort_values(["run", "series", "world_size"]).iterrows()]
    sec.tables.append(Table(["run", "workload", "strategy", "world size", "samples/s",
                             "single samples/s", "efficiency"], table))
    return sec


# ---------------------------------------------------------------- 3. step times
def step_times(frame: pd.DataFrame) -> Section:
    sec = Section("step-times", "Step-time distributions",
                  "Seconds per step of every round (round time / steps per round), from the raw samples.")
    rows = frame[frame["step_samples"].notna()].copy()
    if rows.empty:
        sec.note = "No raw samples in these runs (save them with --benchmark-save-data)."
        return sec
    rows["case"] = _case(rows, with_run=False)
    if rows["case"].nunique() > MAX_CASES:
        keep = rows["case"].drop_duplicates().iloc[:MAX_CASES]
        sec.note = f"Showing the first {MAX_CASES} of {rows['case'].nunique()} cases; the table lists all."
        shown = rows[rows["case"].isin(keep)]
    else:
        shown = rows
    long = shown[["case", "run", "step_samples"]].explode("step_samples")
    long["ms per step"] = _finite(long["step_samples"].astype(float) * 1e3)
    long = long[long["ms per step"] > 0]  # log axis
    if long.empty:
        sec.note = "No positive, finite step times in these runs."
        return sec
    fig = _figure(10, 0.8 + 0.3 * shown["case"].nunique())
    ax = fig.subplots()
    sns.boxplot(data=long, y="case", x="ms per step", hue=_hue(rows), showfliers=False, ax=ax)
    sns.stripplot(data=long, y="case", x="ms per step", hue=_hue(rows), dodge=_hue(rows) is not None,
                  size=2.5, color="black" if _hue(rows) is None else None, alpha=0.5, legend=False, ax=ax)
    ax.set_xscale("log")
    _plain_log_ticks(ax.xaxis)
    ax.set_ylabel("")
    sec.image_png_b64 = figure_png(fig)
    table = []
    for _, r in rows.iterrows():
        s = pd.Series(r["step_samples"], dtype=float)
        table.append([str(r["case"]), str(r["run"]), str(len(s)), fmt_seconds(s.median()), fmt_seconds(s.quantile(0.95)),
                      fmt_seconds(s.min()), fmt_seconds(s.max())])
    sec.tables.append(Table(["case", "run", "rounds", "median", "p95", "min", "max"], table))
    return sec


def _long_by_case(frame: pd.DataFrame, prefix: str, *, var_name: str, value_name: str) -> pd.DataFrame:
    """The flattened ``prefix*`` columns as one long (case, var_name, value_name) table of finite values."""
    columns = [c for c in frame.columns if c.startswith(prefix)]
    if not columns:
        return pd.DataFrame()
    rows = _by_case(frame)
    rows["case"] = _case(rows)
    long = rows.melt(id_vars=["case"], value_vars=columns, var_name=var_name, value_name=value_name)
    long[value_name] = _finite(pd.to_numeric(long[value_name], errors="coerce"))
    return long[long[value_name].notna()]


# ---------------------------------------------------------------- 4. phases
def phases(frame: pd.DataFrame) -> Section:
    sec = Section("phases", "Phase breakdown",
                  "Mean time per step spent in each phase (stacked), where the strategy measured phases.")
    long = _long_by_case(frame, "phases.", var_name="phase", value_name="seconds")
    if long.empty:
        sec.note = "No phase timings (extra_info.phases) in these runs."
        return sec
    long["phase"] = long["phase"].str.removeprefix("phases.")
    known = [p.value for p in Phase]
    order = [p for p in known if p in set(long["phase"])] + sorted(set(long["phase"]) - set(known))
    cases = list(dict.fromkeys(long["case"]))[:MAX_CASES]
    if len(set(long["case"])) > MAX_CASES:
        sec.note = f"Showing the first {MAX_CASES} cases; the table lists all."
    long["ms per step"] = long["seconds"] * 1e3
    wide_ms = long.pivot_table(index="case", columns="phase", values="ms per step", aggfunc="first", sort=False)
    wide_ms = wide_ms.reindex(index=cases[::-1], columns=order).fillna(0.0)  # barh draws bottom-up
    fig = _figure(10, 0.9 + 0.35 * len(cases))
    ax = fig.subplots()
    left = pd.Series(0.0, index=wide_ms.index)
    for phase, color in zip(order, sns.color_palette(n_colors=len(order))):
        ax.barh(wide_ms.index, wide_ms[phase], left=left, color=color, label=phase, height=0.8)
        left = left + wide_ms[phase]
    ax.legend(title="phase", loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    ax.set_xlabel("ms per step")
    ax.margins(y=0.01)
    sec.image_png_b64 = figure_png(fig)
    wide = long.pivot_table(index="case", columns="phase", values="seconds", aggfunc="first", sort=False)
    table = [[str(case)] + [fmt_seconds(wide.loc[case].get(p, math.nan)) for p in order]
             for case in wide.index]
    sec.tables.append(Table(["case"] + order, table))
    return sec


# ---------------------------------------------------------------- 5. memory
def memory(frame: pd.DataFrame) -> Section:
    sec = Section("memory", "Peak memory per device",
                  "Peak memory of each device during the run. Under DataParallel, device 0 holds the "
                  "master copy, the gathered outputs and the loss, so it peaks above the other replicas.")
    long = _long_by_case(frame, "peak_memory_bytes.", var_name="device", value_name="bytes")
    if long.empty:
        sec.note = "No peak memory (extra_info.peak_memory_bytes) in these runs."
        return sec
    long["device"] = long["device"].str.removeprefix("peak_memory_bytes.")
    long["MiB"] = long["bytes"] / 2**20
    cases = list(dict.fromkeys(long["case"]))[:MAX_CASES]
    if len(set(long["case"])) > MAX_CASES:
        sec.note = f"Showing the first {MAX_CASES} cases; the table lists all."
    shown = long[long["case"].isin(cases)].copy()
    # One bar per (case, device): dodging by device would leave empty slots for every
    # device a case does not have (a single-device case in a 4-GPU run).
    shown["bar"] = shown["case"] + " · " + shown["device"]
    position = {c: i for i, c in enumerate(cases)}
    shown = shown.assign(_o=shown["case"].map(position)).sort_values(["_o", "device"], kind="stable")
    fig = _figure(10, 0.9 + 0.22 * len(shown))
    ax = fig.subplots()
    sns.barplot(data=shown, y="bar", x="MiB", hue="device", dodge=False, ax=ax)
    ax.set_ylabel("")
    sec.image_png_b64 = figure_png(fig)
    table = []
    for case, group in long.groupby("case", sort=False):
        devices = "; ".join(f"{d}: {fmt_bytes(b)}" for d, b in zip(group["device"], group["bytes"]))
        ratio = group["bytes"].max() / group["bytes"].min() if group["bytes"].min() > 0 else math.nan
        table.append([str(case), devices, fmt_num(ratio, suffix="×")])
    sec.tables.append(Table(["case", "peak per device", "max / min device"], table))
    return sec


# ---------------------------------------------------------------- 6. timelines
def timelines(frame: pd.DataFrame) -> Section:
    sec = Section("timelines", "Utilization and memory timelines",
                  "What the resource sampler recorded while the benchmarks ran: GPU utilization (CPU "
                  "utilization where there is no GPU) and memory in use, per device. Dotted lines are marks.")
    loaded, notes = timeline.load_timelines(frame)
    if not loaded:
        sec.note = " ".join(notes) or "No sampler timelines (extra_info.sampler.timeline) in these runs."
        return sec
    shown = loaded[: timeline.MAX_TIMELINES]
    if len(loaded) > len(shown):
        notes.append(f"Showing {len(shown)} of {len(loaded)} timelines.")
    fig = _figure(11, 2.6 * len(shown))
    axes = fig.subplots(len(shown), 2, squeeze=False)
    table = []
    for (title, data, marks), (ax_util, ax_mem) in zip(shown, axes):
        devices = sorted(data["device"].unique())
        sns.lineplot(data=data, x="time", y="utilization %", hue="device", hue_order=devices, ax=ax_util)
        sns.lineplot(data=data, x="time", y="memory GiB", hue="device", hue_order=devices, ax=ax_mem, legend=False)
        ax_util.set_ylim(bottom=0)
        for ax in (ax_util, ax_mem):
            ax.set_title(title, fontsize="small")
            ax.set_xlabel("seconds")
            for t in marks["time"]:
                ax.axvline(t, linestyle=":", color="grey", linewidth=0.8)
        for device, group in data.groupby("device"):
            table.append([title, str(device), fmt_num(group["utilization %"].mean()),
                          fmt_num(group["utilization %"].max()), fmt_bytes(group["memory GiB"].max() * 2**30)])
    sec.image_png_b64 = figure_png(fig)
    sec.note = " ".join(notes) or None
    sec.tables.append(Table(["timeline", "device", "mean util %", "max util %", "max memory"], table))
    return sec


# ---------------------------------------------------------------- 7. bus bandwidth
def busbw(frame: pd.DataFrame) -> Section:
    sec = Section("busbw", "Communication bandwidth",
                  "Bus bandwidth (nccl-tests formula) against message size, per collective and world size.")
    rows = frame[frame["kind"] == "collective"].copy()
    rows["size_bytes"] = _numeric(rows, "size_bytes")
    rows["busbw GB/s"] = _numeric(rows, "busbw_gbps")
    rows = rows[rows["size_bytes"].notna() & rows["busbw GB/s"].notna()]
    if rows.empty:
        sec.note = "No communication benchmarks (kind = collective) in these runs."
        return sec
    rows["series"] = (rows["collective"].astype(str) + " w" + rows["world_size"].astype(str)
                      + " " + rows["backend"].fillna("").astype(str))
    fig = _figure(9, 4.5)
    ax = fig.subplots()
    sns.lineplot(data=rows.sort_values("size_bytes"), x="size_bytes", y="busbw GB/s", hue="series",
                 style=_hue(rows), markers=True, ax=ax)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: fmt_bytes(v)))
    ax.set_xlabel("message size")
    sec.image_png_b64 = figure_png(fig)
    table = [[str(r["run"]), str(r["series"]), fmt_bytes(r["size_bytes"]), str(r.get("dtype", "")),
              fmt_seconds(_numeric(rows.loc[[i]], "time_s").iloc[0]),
              fmt_num(_numeric(rows.loc[[i]], "algbw_gbps").iloc[0]), fmt_num(r["busbw GB/s"])]
             for i, r in rows.sort_values(["run", "series", "size_bytes"]).iterrows()]
    sec.tables.append(Table(["run", "collective", "size", "dtype", "time", "algbw GB/s", "busbw GB/s"], table))
    return sec


PLOTS: list[Callable[[pd.DataFrame], Section]] = [
    throughput, scaling, step_times, phases, memory, timelines, busbw,
]


def build_sections(frame: pd.DataFrame) -> list[Section]:
    """Every plot section for ``frame`` (the output of :func:`dpbench.report.load_runs`)."""
    # Strings from results files reach matplotlib as labels: never let "$...$" in a benchmark
    # name be parsed as mathtext (it can fail to parse and abort the report).
    with sns.axes_style("whitegrid"), matplotlib.rc_context({"text.parse_math": False}):
        return [plot(frame) for plot in PLOTS]
