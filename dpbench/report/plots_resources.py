"""The resource views of one suite: phase breakdown, peak memory per device, timelines.

Same contract as :mod:`dpbench.report.plots`: one suite's rows in, a :class:`Part` (or None
when nothing applies) out, every case of every run in every figure and table.
"""
from __future__ import annotations

import math

import pandas as pd
from matplotlib.patches import Patch

from dpbench.report import timeline
from dpbench.report.figures import (RUN_ALPHAS, Image, Part, Table, case_order, finite, panels, png, row_heights,
                                    run_colors, run_offsets, title)
from dpbench.results.units import fmt_bytes, fmt_num, fmt_seconds
from dpbench.schema import Phase

__all__ = ["memory", "phases", "timelines"]


def _long(rows: pd.DataFrame, prefix: str, var_name: str, value_name: str) -> pd.DataFrame:
    """The flattened ``prefix*`` columns as one long table of finite values, one row per value."""
    columns = [c for c in rows.columns if c.startswith(prefix)]
    if not columns:
        return pd.DataFrame()
    ids = ["run", "workload", "case", "name"]
    long = rows.assign(workload=rows["workload"].fillna("").astype(str)).melt(
        id_vars=ids, value_vars=columns, var_name=var_name, value_name=value_name)
    long[value_name] = finite(pd.to_numeric(long[value_name], errors="coerce"))
    long[var_name] = long[var_name].str.removeprefix(prefix)
    return long[long[value_name].notna()]


def _legend(ax, colors: dict[str, tuple], title_text: str, runs: list[str]) -> None:
    """One legend outside the first panel: what each colour is, then (several runs) which shade
    is which run — one box, so short figures do not stack two legends on each other."""
    handles = [Patch(color=c) for c in colors.values()]
    labels = list(colors)
    if len(runs) > 1:
        handles += [Patch(facecolor="dimgray", alpha=RUN_ALPHAS[i % len(RUN_ALPHAS)]) for i in range(len(runs))]
        labels += [f"run {run}" for run in runs]
        title_text += " · run (top to bottom)"
    ax.legend(handles, labels, title=title_text, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")


# ---------------------------------------------------------------- phases
def phases(rows: pd.DataFrame, runs: list[str]) -> Part | None:
    long = _long(rows, "phases.", "phase", "seconds")
    if long.empty:
        return None
    part = Part(key="phases", title="Phase breakdown",
                description="Mean time per step spent in each phase (stacked), where the strategy measured phases; "
                            "with several runs, each case's row holds one bar per run, shaded by run.")
    known = [p.value for p in Phase]
    order = [p for p in known if p in set(long["phase"])] + sorted(set(long["phase"]) - set(known))
    groups = list(long.groupby("workload", sort=False))
    heights = row_heights((len(case_order(g)) * len(runs) for _, g in groups), per_row=0.22)
    fig, axes = panels(heights, labels=long["case"], right=2.6)
    palette = run_colors(order)  # one colour per phase, the same in every panel
    offsets, thickness = run_offsets(runs)
    for (ax,), (workload, group) in zip(axes, groups):
        cases = case_order(group)
        wide = group.pivot_table(index=["case", "run"], columns="phase", values="seconds", aggfunc="first")
        for i, run in enumerate(runs):
            present = [c for c in cases if (c, run) in wide.index]
            ys = [cases.index(c) + offsets[run] for c in present]
            left = [0.0] * len(present)
            for phase in order:
                ms = [float(wide.loc[(c, run)].get(phase, math.nan)) * 1e3 for c in present]
                ms = [0.0 if math.isnan(v) else v for v in ms]
                ax.barh(ys, ms, left=left, height=thickness, color=palette[phase],
                        alpha=RUN_ALPHAS[i % len(RUN_ALPHAS)])
                left = [a + b for a, b in zip(left, ms)]
        ax.set_yticks(range(len(cases)), cases)
        ax.set_ylim(len(cases) - 0.5, -0.5)
        ax.set_xlabel("ms per step")
        title(ax, f"workload: {workload}" if workload else "")
    _legend(axes[0][0], {phase: palette[phase] for phase in order}, "phase", runs)
    part.images.append(Image(title="phase breakdown", png_b64=png(fig)))
    wide = long.pivot_table(index=["run", "workload", "case", "name"], columns="phase", values="seconds",
                            aggfunc="first", sort=False)
    table = [[str(run), str(w) or "–", str(case), str(name)] + [fmt_seconds(wide.loc[(run, w, case, name)].get(p))
                                                               for p in order]
             for run, w, case, name in wide.index]
    part.tables.append(Table(["run", "workload", "case", "benchmark"] + order, table))
    return part


# ---------------------------------------------------------------- memory
def memory(rows: pd.DataFrame, runs: list[str]) -> Part | None:
    long = _long(rows, "peak_memory_bytes.", "device", "bytes")
    if long.empty:
        return None
    part = Part(key="memory", title="Peak memory per device",
                description="Peak memory of each device during the run: one bar per device (coloured) in each "
                            "case's row, one group per run (shaded by run). Under DataParallel, device 0 holds the "
                            "master copy, the gathered outputs and the loss, so it peaks above the other replicas.")
    groups = list(long.groupby("workload", sort=False))
    heights = row_heights((len(case_order(g)) * len(runs) for _, g in groups), per_row=0.25)
    fig, axes = panels(heights, labels=long["case"], right=2.6)
    devices = sorted(set(long["device"]))
    colors = run_colors(devices)
    offsets, thickness = run_offsets(runs)
    for (ax,), (workload, group) in zip(axes, groups):
        cases = case_order(group)
        n_devices = group.groupby(["case", "run"])["device"].transform("count")
        slot = group.groupby(["case", "run"]).cumcount()
        bar = thickness / n_devices
        y = group["case"].map({c: i for i, c in enumerate(cases)}) + group["run"].map(offsets) \
            - thickness / 2 + bar * (slot + 0.5)
        for i, run in enumerate(runs):  # one barh call per run: one per bar would dominate the report's time
            mine = group["run"] == run
            ax.barh(y[mine], group["bytes"][mine] / 2**20, height=bar[mine],
                    color=list(group["device"][mine].map(colors)), alpha=RUN_ALPHAS[i % len(RUN_ALPHAS)])
        ax.set_yticks(range(len(cases)), cases)
        ax.set_ylim(len(cases) - 0.5, -0.5)
        ax.set_xlabel("MiB")
        title(ax, f"workload: {workload}" if workload else "")
    _legend(axes[0][0], colors, "device", runs)
    part.images.append(Image(title="peak memory", png_b64=png(fig)))
    table = []
    for (run, w, case, name), group in long.groupby(["run", "workload", "case", "name"], sort=False):
        per_device = "; ".join(f"{d}: {fmt_bytes(b)}" for d, b in zip(group["device"], group["bytes"]))
        ratio = group["bytes"].max() / group["bytes"].min() if group["bytes"].min() > 0 else math.nan
        table.append([str(run), str(w) or "–", str(case), str(name), per_device, fmt_num(ratio, suffix="×")])
    part.tables.append(Table(["run", "workload", "case", "benchmark", "peak per device", "max / min device"], table))
    return part


# ---------------------------------------------------------------- timelines
def timelines(rows: pd.DataFrame, runs: list[str]) -> Part | None:
    loaded, notes = timeline.load_timelines(rows)
    if not loaded and not notes:
        return None
    part = Part(key="timelines", title="Utilization and memory timelines",
                description="What the resource sampler recorded during each case's first trial, one line per run "
                            "so runs compare case by case: GPU utilization averaged over the GPUs (system CPU "
                            "where there is none) and memory in use summed over the GPUs (the worker processes' "
                            "memory on CPU). Dotted lines are marks.")
    part.note = " ".join(notes) or None
    if not loaded:
        return part
    cases = list(dict.fromkeys((t.case for t in loaded)))
    fig, axes = panels([1.5] * len(cases), width=11, cols=2, gap=0.75)
    colors = run_colors(runs)
    table = []
    for (ax_util, ax_mem), case in zip(axes, cases):
        for t in (t for t in loaded if t.case == case):
            totals = t.totals()
            ax_util.plot(totals.index, totals["utilization %"], color=colors[t.run], label=t.run)
            ax_mem.plot(totals.index, totals["memory GiB"], color=colors[t.run], label=t.run)
            for mark in t.marks["time"]:
                ax_util.axvline(mark, linestyle=":", color=colors[t.run], linewidth=0.8)
            table.append([t.run, case, t.name, t.file, fmt_num(totals["utilization %"].mean()),
                          fmt_num(totals["utilization %"].max()), fmt_bytes(totals["memory GiB"].max() * 2**30)])
        title(ax_util, f"{case}: utilization %", size="small")
        title(ax_mem, f"{case}: memory GiB", size="small")
        ax_util.set_ylim(bottom=0)
    for ax in axes[-1]:
        ax.set_xlabel("seconds since the sampler started")
    if len(runs) > 1:  # colours mean the same run in every row
        axes[0][0].legend(fontsize="small", loc="lower left", bbox_to_anchor=(0.0, 1.15), ncols=min(4, len(runs)))
    part.images.append(Image(title="timelines", png_b64=png(fig)))
    columns = ["run", "case", "benchmark", "timeline", "mean util %", "max util %", "max memory"]
    part.tables.append(Table(columns, table))
    return part
