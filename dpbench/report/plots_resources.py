"""The resource views of one suite: phase breakdown, peak memory per device, timelines.

Same contract as :mod:`dpbench.report.plots`: one suite's rows in, a :class:`Part` (or None
when nothing applies) out, every case of every run in every figure and table.
"""
from __future__ import annotations

import math

import matplotlib
import pandas as pd
from matplotlib.patches import Patch

from dpbench.report import timeline
from dpbench.report.figures import (category_labels, RUN_ALPHAS, Part, Table, case_order, finite, hbars, panels, row_heights,
                                    run_offsets, strategy_color, strategy_legend, svg, title, two_runs)
from dpbench.results.units import fmt_bytes, fmt_num, fmt_seconds
from dpbench.schema import Phase

__all__ = ["memory", "phases", "timelines"]


def _long(rows: pd.DataFrame, prefix: str, var_name: str, value_name: str) -> pd.DataFrame:
    """The flattened ``prefix*`` columns as one long table of finite values, one row per value."""
    columns = [c for c in rows.columns if c.startswith(prefix)]
    if not columns:
        return pd.DataFrame()
    ids = ["run", "workload", "case", "name", "suites"]
    long = rows.assign(workload=rows["workload"].fillna("").astype(str),
                       suites=[", ".join(s) if isinstance(s, tuple) else "" for s in rows["suites"]]).melt(
        id_vars=ids, value_vars=columns, var_name=var_name, value_name=value_name)
    long[value_name] = finite(pd.to_numeric(long[value_name], errors="coerce"))
    long[var_name] = long[var_name].str.removeprefix(prefix)
    return long[long[value_name].notna()]


def _run_legend(ax, colors: dict[str, tuple], title_text: str, runs: list[str]) -> None:
    """One legend outside the first panel: what each colour is, then (several runs) which bar is
    which run — one box, so short figures do not stack two legends on each other."""
    handles = [Patch(color=c) for c in colors.values()]
    labels = list(colors)
    if len(runs) > 1:
        first, last = two_runs(runs)
        handles += [Patch(facecolor="dimgray"), Patch(facecolor="dimgray", alpha=RUN_ALPHAS[2])]
        labels += [f"{last} (newest)", f"{first} (first)"]
        title_text += " · run"
    ax.legend(handles, labels, title=title_text, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small",
              title_fontsize="small")


def _phase_colors(order: list[str]) -> dict[str, tuple]:
    # Phases are not strategies: shades of one sequential map, so no phase reads as a strategy's colour.
    cmap = matplotlib.colormaps["YlGnBu"]
    n = max(1, len(order) - 1)
    return {phase: cmap(0.2 + 0.75 * i / n) for i, phase in enumerate(order)}


# ---------------------------------------------------------------- phases
def phases(rows: pd.DataFrame, runs: list[str]) -> Part | None:
    long = _long(rows, "phases.", "phase", "seconds")
    if long.empty:
        return None
    shown = list(dict.fromkeys(two_runs(runs)))
    part = Part(key="phases", title="Phase breakdown",
                description="Mean time per step spent in each phase (stacked; colour = phase, in shades of one hue "
                            "so that no phase reads as a strategy), where the strategy measured phases"
                            + ("; per configuration, the newest run's bar above the first run's (lighter)."
                               if len(runs) > 1 else "."))
    known = [p.value for p in Phase]
    order = [p for p in known if p in set(long["phase"])] + sorted(set(long["phase"]) - set(known))
    groups = list(long.groupby("workload", sort=False))
    heights = row_heights((len(case_order(g)) * len(shown) for _, g in groups), per_row=0.2)
    fig, axes = panels(heights, labels=long["case"], right=2.6)
    palette = _phase_colors(order)
    offsets, thickness = run_offsets(shown[::-1])
    for (ax,), (workload, group) in zip(axes, groups):
        cases = case_order(group)
        wide = group.pivot_table(index=["case", "run"], columns="phase", values="seconds", aggfunc="first")
        wide = wide.reindex(columns=[p for p in order if p in wide.columns]).fillna(0.0) * 1e3
        for run in shown:  # one barh per phase and run: the whole panel in a handful of calls
            mine = wide[wide.index.get_level_values("run") == run]
            ys = [cases.index(c) + offsets[run] for c in mine.index.get_level_values("case")]
            left = pd.Series(0.0, index=mine.index)
            for phase in mine.columns:
                hbars(ax, ys, list(mine[phase]), left=list(left), height=thickness, color=palette[phase],
                      alpha=1.0 if run == shown[-1] else RUN_ALPHAS[2])
                left = left + mine[phase]
        category_labels(ax, cases)
        ax.set_xlabel("ms per step")
        title(ax, f"workload: {workload}" if workload else "")
    _run_legend(axes[0][0], {phase: palette[phase] for phase in order}, "phase", runs)
    part.images.append(svg(fig, "phase breakdown"))
    wide = long.pivot_table(index=["run", "workload", "case", "suites"], columns="phase", values="seconds",
                            aggfunc="first", sort=False)
    wide = wide.reindex(columns=order)
    table = [[str(run), str(w) or "–", str(case), str(suites)] + [fmt_seconds(v) for v in values]
             for (run, w, case, suites), *values in wide.itertuples(name=None)]
    part.tables.append(Table(["run", "workload", "configuration", "suites"] + order, table))
    return part


# ---------------------------------------------------------------- memory
def memory(rows: pd.DataFrame, runs: list[str]) -> Part | None:
    long = _long(rows, "peak_memory_bytes.", "device", "bytes")
    if long.empty:
        return None
    shown = list(dict.fromkeys(two_runs(runs)))
    part = Part(key="memory", title="Peak memory per device",
                description="Peak memory of each device during the run. Per configuration, a bar to the largest "
                            "device's peak (colour = strategy) and a black tick at every device's: ticks far apart "
                            "mean the devices are unbalanced. Under DataParallel, device 0 holds the master copy, "
                            "the gathered outputs and the loss, so it peaks above the other replicas"
                            + ("; hollow: the first run." if len(runs) > 1 else "."))
    groups = list(long.groupby("workload", sort=False))
    heights = row_heights((len(case_order(g)) * len(shown) for _, g in groups), per_row=0.2)
    fig, axes = panels(heights, labels=long["case"], right=2.4)
    offsets, thickness = run_offsets(shown[::-1])
    strategy_of = dict(zip(rows["case"].astype(str), rows["strategy"]))
    for (ax,), (workload, group) in zip(axes, groups):
        cases = case_order(group)
        position = {c: i for i, c in enumerate(cases)}
        for run in shown:  # one barh and one tick plot per run: one call per bar would dominate the time
            mine = group[group["run"] == run]
            peak = mine.groupby("case", sort=False)["bytes"].max() / 2**20
            ys = [position[c] + offsets[run] for c in peak.index]
            colors = [strategy_color(strategy_of.get(c)) for c in peak.index]
            newest = run == shown[-1]
            hbars(ax, ys, list(peak), height=thickness, color=colors if newest else "white", edgecolor=colors,
                  linewidth=0 if newest else 1.2, alpha=0.85)
            ax.plot(mine["bytes"] / 2**20, [position[c] + offsets[run] for c in mine["case"]], "|", color="black",
                    markersize=7, linestyle="none")
        category_labels(ax, cases)
        ax.set_xlabel("MiB")
        title(ax, f"workload: {workload}" if workload else "")
    strategy_legend(axes[0][0], rows["strategy"].dropna(), runs)
    part.images.append(svg(fig, "peak memory"))
    table = []
    for (run, w, case, suites), group in long.groupby(["run", "workload", "case", "suites"], sort=False):
        per_device = "; ".join(f"{d}: {fmt_bytes(b)}" for d, b in zip(group["device"], group["bytes"]))
        ratio = group["bytes"].max() / group["bytes"].min() if group["bytes"].min() > 0 else math.nan
        table.append([str(run), str(w) or "–", str(case), str(suites), per_device, fmt_num(ratio, suffix="×")])
    part.tables.append(Table(["run", "workload", "configuration", "suites", "peak per device", "max / min device"],
                             table))
    return part


# ---------------------------------------------------------------- timelines
def timelines(rows: pd.DataFrame, runs: list[str]) -> Part | None:
    loaded, notes = timeline.load_timelines(rows)
    if not loaded and not notes:
        return None
    shown = list(dict.fromkeys(two_runs(runs)))
    part = Part(key="timelines", title="Utilization and memory timelines",
                description="What the resource sampler recorded during each configuration's first trial: GPU "
                            "utilization averaged over the GPUs (system CPU where there is none) and memory in use "
                            "summed over the GPUs (the worker processes' memory on CPU). Colour = strategy"
                            + ("; solid: the newest run, dashed: the first (every run's numbers are in the table)"
                               if len(runs) > 1 else "") + ". Dotted vertical lines are marks.")
    part.note = " ".join(notes) or None
    if not loaded:
        return part
    cases = list(dict.fromkeys((t.case for t in loaded)))
    fig, axes = panels([1.3] * len(cases), width=10, cols=2, gap=0.7)
    strategy_of = {}
    for _, r in rows.iterrows():
        w = r["workload"] if isinstance(r["workload"], str) and r["workload"] else None
        strategy_of[f"{w}: {r['case']}" if w else str(r["case"])] = r["strategy"]
    table = []
    for (ax_util, ax_mem), case in zip(axes, cases):
        color = strategy_color(strategy_of.get(case))
        for t in (t for t in loaded if t.case == case):
            totals = t.totals()
            table.append([t.run, case, t.name, t.file, fmt_num(totals["utilization %"].mean()),
                          fmt_num(totals["utilization %"].max()), fmt_bytes(totals["memory GiB"].max() * 2**30)])
            if t.run not in shown:
                continue
            style = "-" if t.run == shown[-1] else "--"
            ax_util.plot(totals.index, totals["utilization %"], color=color, linestyle=style, linewidth=1)
            ax_mem.plot(totals.index, totals["memory GiB"], color=color, linestyle=style, linewidth=1)
            for mark in t.marks["time"]:
                ax_util.axvline(mark, linestyle=":", color="gray", linewidth=0.8)
        title(ax_util, f"{case}: utilization %", size="small")
        title(ax_mem, f"{case}: memory GiB", size="small")
        ax_util.set_ylim(bottom=0)
    for ax in axes[-1]:
        ax.set_xlabel("seconds since the sampler started")
    part.images.append(svg(fig, "timelines"))
    columns = ["run", "configuration", "benchmark", "timeline", "mean util %", "max util %", "max memory"]
    part.tables.append(Table(columns, table))
    return part
