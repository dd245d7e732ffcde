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
from dpbench.report.figures import (
    RUN_ALPHAS,
    Part,
    Table,
    case_order,
    category_labels,
    finite,
    hbars,
    panels,
    row_heights,
    run_offsets,
    strategy_color,
    strategy_legend,
    svg,
    title,
    two_runs,
)
from dpbench.report.memory_estimate import ERROR_COLUMNS, error_table, estimated_need
from dpbench.results.units import fmt_bytes, fmt_num, fmt_seconds
from dpbench.schema import Phase

__all__ = ["memory", "phases", "timelines"]


def _long(rows: pd.DataFrame, prefix: str, var_name: str, value_name: str) -> pd.DataFrame:
    """The flattened ``prefix*`` columns as one long table of finite values, one row per value."""
    columns = [c for c in rows.columns if c.startswith(prefix)]
    if not columns:
        return pd.DataFrame()
    ids = ["run", "workload", "case", "name", "suites"]
    long = rows.assign(
        workload=rows["workload"].fillna("").astype(str),
        suites=[", ".join(s) if isinstance(s, tuple) else "" for s in rows["suites"]],
    ).melt(id_vars=ids, value_vars=columns, var_name=var_name, value_name=value_name)
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
    ax.legend(
        handles,
        labels,
        title=title_text,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        fontsize="small",
        title_fontsize="small",
    )


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
    part = Part(
        key="phases",
        title="Phase breakdown",
        description="Mean time per step spent in each phase (stacked; colour = phase, in shades of one hue "
        "so that no phase reads as a strategy), where the strategy measured phases"
        + ("; per configuration, the newest run's bar above the first run's (lighter)." if len(runs) > 1 else "."),
    )
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
                hbars(
                    ax,
                    ys,
                    list(mine[phase]),
                    left=list(left),
                    height=thickness,
                    color=palette[phase],
                    alpha=1.0 if run == shown[-1] else RUN_ALPHAS[2],
                )
                left = left + mine[phase]
        category_labels(ax, cases)
        ax.set_xlabel("ms per step")
        title(ax, f"workload: {workload}" if workload else "")
    _run_legend(axes[0][0], {phase: palette[phase] for phase in order}, "phase", runs)
    part.images.append(svg(fig, "phase breakdown"))
    wide = long.pivot_table(
        index=["run", "workload", "case", "suites"], columns="phase", values="seconds", aggfunc="first", sort=False
    )
    wide = wide.reindex(columns=order)
    table = [
        [str(run), str(w) or "–", str(case), str(suites)] + [fmt_seconds(v) for v in values]
        for (run, w, case, suites), *values in wide.itertuples(name=None)
    ]
    part.tables.append(Table(["run", "workload", "configuration", "suites"] + order, table))
    return part


# ---------------------------------------------------------------- memory
def memory(rows: pd.DataFrame, runs: list[str]) -> Part | None:
    long = _long(rows, "peak_memory_bytes.", "device", "bytes")
    if long.empty:
        return None
    shown = list(dict.fromkeys(two_runs(runs)))
    part = Part(
        key="memory",
        title="Peak memory per device",
        description="Peak memory of each device during the run. Per configuration, a bar to the largest "
        "device's peak (colour = strategy) and a black tick at every device's: ticks far apart "
        "mean the devices are unbalanced. Under DataParallel, device 0 holds the master copy, "
        "the gathered outputs and the loss, so it peaks above the other replicas"
        + ("; hollow: the first run." if len(runs) > 1 else ".")
        + " A red diamond marks the estimated peak of the largest rank, made before the case launched "
        "(dpbench estimate); the table below lists the estimate's error per case. On CUDA the measured "
        "peak is the allocator's; on CPU it is the worker's whole resident set (the Python and torch "
        "runtime included), so there the estimate is expected below it.",
    )
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
            hbars(
                ax,
                ys,
                list(peak),
                height=thickness,
                color=colors if newest else "white",
                edgecolor=colors,
                linewidth=0 if newest else 1.2,
                alpha=0.85,
            )
            ax.plot(
                mine["bytes"] / 2**20,
                [position[c] + offsets[run] for c in mine["case"]],
                "|",
                color="black",
                markersize=7,
                linestyle="none",
            )
            estimated = rows[rows["run"] == run].assign(need=estimated_need(rows)).dropna(subset=["need"])
            estimated = estimated[estimated["case"].isin(position)].drop_duplicates("case")
            ax.plot(
                estimated["need"] / 2**20,
                [position[c] + offsets[run] for c in estimated["case"]],
                "D",
                markerfacecolor="none",
                markeredgecolor="crimson",
                markersize=5,
                linestyle="none",
            )
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
    part.tables.append(
        Table(["run", "workload", "configuration", "suites", "peak per device", "max / min device"], table)
    )
    errors = error_table(rows)
    if errors:
        part.tables.append(Table(ERROR_COLUMNS, errors))
    return part


# ---------------------------------------------------------------- timelines
TIME_BINS = 120  # columns of a timeline strip: finer than a figure's pixels per second would show


def _strip(totals: pd.DataFrame, column: str, end: float, bins: int) -> list[float]:
    """``column`` averaged over ``bins`` equal bins of [0, end]; a bin without a sample holds the
    reading before it (the sampler reads periodically), and nothing is drawn after the last one."""
    values = totals[column].dropna()
    sums, counts = [0.0] * bins, [0] * bins
    for t, v in zip(values.index, values):
        i = min(bins - 1, max(0, int(t / end * bins))) if end > 0 else 0
        sums[i] += float(v)
        counts[i] += 1
    out, last = [], math.nan
    final = max((i for i, c in enumerate(counts) if c), default=-1)
    for i, (s, c) in enumerate(zip(sums, counts)):
        last = s / c if c else last
        out.append(last if i <= final else math.nan)
    return out


def timelines(rows: pd.DataFrame, runs: list[str]) -> Part | None:
    newest = two_runs(runs)[1]
    # Only the newest run's files are read: they are what the figure and its table show, and with
    # every case recording a timeline, reading every run's would grow the report's time with each run.
    loaded, notes = timeline.load_timelines(rows[rows["run"] == newest])
    if not loaded and not notes:
        return None
    part = Part(
        key="timelines",
        title="Utilization and memory timelines",
        description="What the resource sampler recorded during each configuration's first trial, one strip "
        "per configuration: left, GPU utilization averaged over the GPUs (system CPU where "
        "there is none), darker = busier; right, memory in use summed over the GPUs (the worker "
        "processes' memory on CPU), darker = more. A pale gap inside a strip is a stall. "
        + (f"The newest run ({newest}) only. " if len(runs) > 1 else "")
        + "One panel per workload.",
    )
    part.note = " ".join(notes) or None
    if not loaded:
        return part
    table, drawn = [], {}
    for t in loaded:
        totals = t.totals()
        table.append(
            [
                t.run,
                t.case,
                t.name,
                t.file,
                fmt_num(totals["utilization %"].mean()),
                fmt_num(totals["utilization %"].max()),
                fmt_bytes(totals["memory GiB"].max() * 2**30),
            ]
        )
        if t.run == newest:
            workload = t.case.split(": ", 1)[0] if ": " in t.case else ""
            drawn.setdefault(workload, []).append((t.case.split(": ", 1)[-1], totals))
    part.tables.append(
        Table(["run", "configuration", "benchmark", "timeline", "mean util %", "max util %", "max memory"], table)
    )
    if not drawn:
        return part
    # One image per workload panel (imshow): a panel of axes per configuration made the figure
    # cost seconds once every case records a timeline.
    groups = list(drawn.items())
    heights = row_heights((len(g) for _, g in groups), per_row=0.2)
    fig, axes = panels(heights, labels=[c for _, g in groups for c, _ in g], cols=2, gap=0.7)
    memory_top = max(float(tot["memory GiB"].max()) for _, g in groups for _, tot in g) or 1.0
    for (ax_util, ax_mem), (workload, group) in zip(axes, groups):
        end = max(float(tot.index.max()) for _, tot in group) or 1.0
        bins = max(1, min(TIME_BINS, max(len(tot) for _, tot in group)))  # no finer than the samples
        for ax, column, top, cmap in (
            (ax_util, "utilization %", 100.0, "Greys"),
            (ax_mem, "memory GiB", memory_top, "Purples"),
        ):
            ax.imshow(
                [_strip(tot, column, end, bins) for _, tot in group],
                aspect="auto",
                cmap=cmap,
                vmin=0,
                vmax=top,
                extent=(0, end, len(group) - 0.5, -0.5),
                interpolation="nearest",
            )
            ax.grid(False)
        category_labels(ax_util, [c for c, _ in group])
        ax_mem.set_yticks([])
        title(ax_util, f"{workload + ': ' if workload else ''}utilization % (0–100)", size="small")
        title(ax_mem, f"{workload + ': ' if workload else ''}memory GiB (0–{memory_top:.3g})", size="small")
    for ax in axes[-1]:
        ax.set_xlabel("seconds since the sampler started")
    part.images.append(svg(fig, "timelines"))  # the strips go in as one embedded raster, the text stays text
    return part
