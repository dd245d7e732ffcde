"""The views of one suite: headline numbers, throughput, scaling, step times, bandwidth.

Every function takes one suite's rows of the frame (every run) and the run names, and returns
a :class:`Part`, or None when the suite holds nothing it shows. No case is ever dropped: each
figure has a row per case (one bar or box per run) and each table a row per benchmark and run.
Step-time distributions live in :mod:`dpbench.report.plots_step_times` (re-exported here), phases,
memory and timelines in :mod:`dpbench.report.plots_resources`, and what the views share (workload
panels, cell text) in :mod:`dpbench.report.plots_rows`.
"""

from __future__ import annotations

import math

import matplotlib.ticker
import pandas as pd

from dpbench.decision.configs import SINGLE, single_for, vs_single
from dpbench.report.figures import (
    Part,
    Table,
    case_order,
    category_labels,
    hbars,
    hlines,
    numeric,
    panels,
    row_heights,
    run_offsets,
    strategy_color,
    strategy_legend,
    svg,
    title,
    two_runs,
)
from dpbench.report.plots_rows import (
    energy_absence,
    energy_cells,
    interval_text,
    suites_text,
    workload_text,
    workloads,
)
from dpbench.report.plots_step_times import step_times
from dpbench.results.units import fmt_bytes, fmt_num, fmt_pct, fmt_seconds

__all__ = ["busbw", "headline", "ratio_text", "scaling", "step_times", "throughput"]


# ---------------------------------------------------------------- headline numbers
def headline(rows: pd.DataFrame, runs: list[str]) -> Part:
    part = Part(
        key="headline",
        title="Every configuration's numbers",
        description="Per configuration and run: the median over trials (fresh worker processes) of each "
        "trial's median time per step (per call for collectives), with its 95% interval from "
        "the trials; samples/s = global batch / that time. Between-trial CV: how much a whole "
        "case moves from process to process. Control: the fixed computation each trial timed "
        "in its own workers (it moves when the machine does). A configuration several suites "
        "published is one measurement: one row, its suites and benchmarks listed.",
    )
    extra = [c for c in ("scaling_efficiency", "relative_to_ddp") if numeric(rows, c).notna().any()]
    # GPU energy as columns where any case read it; where none did, why, once (a CPU run has no counter).
    energy = numeric(rows, "energy.j_per_sample").notna().any()
    absent = sorted({why for _, r in rows.iterrows() if (why := energy_absence(r))})
    if energy:
        part.description += (
            " J/sample and avg W: the GPUs' energy counter's difference over each trial's timed rounds (not "
            "power × time), per sample trained and per second; medians over trials, beside the GPUs' idle draw."
        )
    elif absent:
        part.description += f" GPU energy per sample is absent: {'; '.join(absent)}."
    columns = (
        [
            "run",
            "workload",
            "configuration",
            "suites",
            "benchmarks",
            "trials",
            "time",
            "95% CI",
            "samples/s",
            "samples/s 95% CI",
            "between-trial CV",
            "control",
            "control CV",
        ]
        + extra
        + (["J/sample", "avg W"] if energy else [])
    )
    # Suite metrics come straight from extra_info: anything but a number reads as missing.
    metrics = {c: numeric(rows, c) for name in extra for c in (name, f"{name}_ci95_lo", f"{name}_ci95_hi")}
    table = []
    for _, r in rows.iterrows():
        cells = [
            str(r["run"]),
            workload_text(r["workload"]),
            str(r["case"]),
            suites_text(r),
            " ".join(r["benchmarks"]),
            str(r["trials_count"]),
            f"{fmt_seconds(r['step_time_s'])}{r['unit'].removeprefix('s')}",
            interval_text(r["step_time_ci95_lo"], r["step_time_ci95_hi"]),
            fmt_num(r["samples_per_s"]),
            interval_text(r["samples_per_s_ci95_lo"], r["samples_per_s_ci95_hi"], fmt_num),
            fmt_pct(r["trial_cv"]),
            fmt_seconds(r["control_median_s"]),
            fmt_pct(r["control_cv"]),
        ]
        for c in extra:
            value, lo, hi = (metrics[k].loc[r.name] for k in (c, f"{c}_ci95_lo", f"{c}_ci95_hi"))
            ci = "" if math.isnan(lo) else f" ({lo:.3g}–{hi:.3g})"
            cells.append("–" if math.isnan(value) else f"{value:.3g}{ci}")
        if energy:
            cells += list(energy_cells(r))
        if isinstance(r.get("incomparable"), str):
            cells[6] = f"unknown: {r['incomparable']}"
        table.append(cells)
    part.tables.append(Table(columns, table))
    return part


def _bars(ax, ys, values, lo, hi, color, *, hollow: bool, thickness: float) -> None:
    hbars(
        ax,
        ys,
        list(values),
        height=thickness,
        color="white" if hollow else color,
        edgecolor=color,
        linewidth=1.2 if hollow else 0,
    )
    hlines(ax, ys, list(lo), list(hi), color="black", caps=thickness / 4)


# ---------------------------------------------------------------- throughput
def throughput(rows: pd.DataFrame, runs: list[str]) -> Part | None:
    rows = rows[rows["kind"].fillna("training") != "collective"]
    values = numeric(rows, "samples_per_s")
    if rows.empty or not values.notna().any():
        return None
    shown = list(dict.fromkeys(two_runs(runs)))
    part = Part(
        key="throughput",
        title="Throughput",
        description="Samples per second (global batch / median step time over trials), with the 95% "
        "interval from the trials as error bars. One panel per workload; colour = strategy. "
        + (
            "Filled: the newest run; hollow: the first run (runs in between are in the table). "
            if len(runs) > 1
            else ""
        )
        + "Higher is better.",
    )
    groups = workloads(rows)
    heights = row_heights((len(case_order(g)) * len(shown) for _, g in groups), per_row=0.2)
    fig, axes = panels(heights, labels=rows["case"], right=2.4)
    offsets, thickness = run_offsets(shown[::-1])
    for (ax,), (workload, group) in zip(axes, groups):
        cases = case_order(group)
        position = {c: i for i, c in enumerate(cases)}
        for run in shown:
            mine = group[group["run"] == run]
            value = numeric(mine, "samples_per_s")
            ok = value > 0
            lo, hi = numeric(mine, "samples_per_s_ci95_lo"), numeric(mine, "samples_per_s_ci95_hi")
            ys = [position[c] + offsets[run] for c in mine["case"][ok]]
            colors = [strategy_color(s) for s in mine["strategy"][ok]]
            _bars(ax, ys, value[ok], lo[ok], hi[ok], colors, hollow=run != shown[-1], thickness=thickness)
        category_labels(ax, cases)
        title(ax, f"workload: {workload}" if workload else "")
        ax.set_xlabel("samples/s")
    strategy_legend(axes[0][0], rows["strategy"], runs)
    part.images.append(svg(fig, "throughput"))
    part.tables.append(_throughput_table(rows))
    return part


def _throughput_table(rows: pd.DataFrame) -> Table:
    """Samples/s per configuration, and × single of the same run at the same global batch
    (the paired trials of :func:`dpbench.decision.configs.vs_single`, as everywhere on the page)."""
    singles = single_for(rows)
    table = []
    for _, r in rows.iterrows():
        single = singles.get((str(r["run"]), str(r["workload"]), float(r["batch"])))
        ratio = vs_single(r, single) if single is not None and r["strategy"] != SINGLE else None
        table.append(
            [
                str(r["run"]),
                workload_text(r["workload"]),
                str(r["case"]),
                suites_text(r),
                fmt_num(r["samples_per_s"]),
                interval_text(r["samples_per_s_ci95_lo"], r["samples_per_s_ci95_hi"], fmt_num),
                "–" if ratio is None else ratio_text(ratio),
            ]
        )
    return Table(
        [
            "run",
            "workload",
            "configuration",
            "suites",
            "samples/s",
            "95% CI",
            "× single at the same global batch (95% CI)",
        ],
        table,
    )


def ratio_text(ratio) -> str:
    """``1.31× (1.22–1.40)``; a ratio without an interval says how many pairs it had."""
    if math.isnan(ratio.ratio):
        return "–"
    if math.isnan(ratio.lo):
        return f"{ratio.ratio:.2f}× (1 trial: no interval)"
    return f"{ratio.ratio:.2f}× ({ratio.lo:.2f}–{ratio.hi:.2f})"


# ---------------------------------------------------------------- scaling
def scaling(rows: pd.DataFrame, runs: list[str]) -> Part | None:
    eff = numeric(rows, "scaling_efficiency")
    ws = numeric(rows, "world_size")
    rows = rows.assign(
        efficiency=eff,
        ws=ws,
        eff_lo=numeric(rows, "scaling_efficiency_ci95_lo"),
        eff_hi=numeric(rows, "scaling_efficiency_ci95_hi"),
        single=numeric(rows, "baseline_samples_per_s"),
    )[eff.notna() & ws.notna()]
    if rows.empty:
        return None
    part = Part(
        key="scaling",
        title="Scaling efficiency (weak scaling)",
        description="Weak scaling: each replica keeps its batch, so N replicas process N times the "
        "samples. Scaling efficiency = throughput at world size N / (N × single's throughput "
        "on one replica's batch), trial by trial; the median over trials with its 95% interval "
        "as error bars. 100% is ideal linear scaling (the labelled line). One panel per "
        "workload, one line per strategy (colour)"
        + (", solid: the newest run, dashed: the first." if len(runs) > 1 else "."),
    )
    shown = list(dict.fromkeys(two_runs(runs)))
    groups = workloads(rows)
    cols = min(2, len(groups))
    n_rows = math.ceil(len(groups) / cols)
    fig, axes = panels([2.4] * n_rows, width=10, right=2.2, cols=cols)
    flat = [ax for row in axes for ax in row]
    for ax, (workload, group) in zip(flat, groups):
        for strategy, series in group.groupby("strategy_label", sort=False):
            for run in shown:
                line = series[series["run"] == run].sort_values("ws")
                if line.empty:
                    continue
                err = [
                    (line["efficiency"] - line["eff_lo"]).fillna(0).clip(lower=0),
                    (line["eff_hi"] - line["efficiency"]).fillna(0).clip(lower=0),
                ]
                color = strategy_color(line["strategy"].iloc[0])
                newest = run == shown[-1]
                ax.errorbar(
                    line["ws"],
                    line["efficiency"] * 100,
                    yerr=[e * 100 for e in err],
                    marker="o",
                    capsize=3,
                    color=color,
                    linestyle="-" if newest else "--",
                    markerfacecolor=color if newest else "white",
                    label=str(strategy),
                )
        ax.axhline(100.0, linestyle=":", color="black", linewidth=1)
        ax.text(
            1.0, 100.0, "ideal (100%) ", transform=ax.get_yaxis_transform(), ha="right", va="bottom", fontsize="small"
        )
        ax.set_xticks(sorted(group["ws"].unique()))
        ax.set_ylim(0, max(110.0, float((group["eff_hi"].fillna(group["efficiency"]) * 100).max()) + 5))
        ax.set_xlabel("world size")
        ax.set_ylabel("scaling efficiency %")
        title(ax, f"workload: {workload}" if workload else "")
    for ax in flat[len(groups) :]:
        ax.set_visible(False)
    strategy_legend(flat[cols - 1], rows["strategy"], runs, lines=True)
    part.images.append(svg(fig, "scaling efficiency"))
    table = []
    for _, r in rows.sort_values(["run", "workload", "strategy_label", "ws"]).iterrows():
        table.append(
            [
                str(r["run"]),
                str(r["workload"]),
                str(r["strategy_label"]),
                fmt_num(r["ws"]),
                suites_text(r),
                fmt_num(r["samples_per_s"]),
                fmt_num(r["single"]),
                f"{r['efficiency']:.1%}",
                "–" if math.isnan(r["eff_lo"]) else f"{r['eff_lo']:.1%} – {r['eff_hi']:.1%}",
            ]
        )
    part.tables.append(
        Table(
            [
                "run",
                "workload",
                "strategy",
                "world size",
                "suites",
                "samples/s",
                "single samples/s",
                "scaling efficiency",
                "95% CI",
            ],
            table,
        )
    )
    return part


# ---------------------------------------------------------------- bus bandwidth
def busbw(rows: pd.DataFrame, runs: list[str]) -> Part | None:
    rows = rows[rows["kind"] == "collective"].assign(
        size=lambda f: numeric(f, "size_bytes"), bw=lambda f: numeric(f, "busbw_gbps")
    )
    if rows.empty:
        return None
    part = Part(
        key="busbw",
        title="Communication bandwidth",
        description="Bus bandwidth (nccl-tests formula, from the median time per call over trials) "
        "against message size, per collective and world size"
        + ("; solid: the newest run, dashed: the first." if len(runs) > 1 else "."),
    )
    plotted = rows[(rows["size"] > 0) & (rows["bw"] > 0)]  # log axis: positive sizes only
    if plotted.empty:
        part.note = "No finite message sizes and bandwidths to plot."
    else:
        fig, [[ax]] = panels([3.0], width=10, right=3.2)
        shown = list(dict.fromkeys(two_runs(runs)))
        series = (
            plotted["collective"].astype(str)
            + " w"
            + plotted["world_size"].astype(str)
            + " "
            + plotted["backend"].fillna("").astype(str)
        )
        plotted = plotted.assign(series=series)
        for name, group in plotted.groupby("series", sort=False):
            color = strategy_color(str(group["collective"].iloc[0]))  # colour = what was run, as for strategies
            for run in shown:
                line = group[group["run"] == run].sort_values("size")
                newest = run == shown[-1]
                ax.plot(
                    line["size"],
                    line["bw"],
                    marker="o",
                    color=color,
                    linestyle="-" if newest else "--",
                    markerfacecolor=color if newest else "white",
                    label=f"{name} · {run}" if len(shown) > 1 else name,
                )
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: fmt_bytes(v)))
        ax.set_xlabel("message size")
        ax.set_ylabel("busbw GB/s")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
        part.images.append(svg(fig, "bus bandwidth"))
    table = [
        [
            str(r["run"]),
            str(r["name"]),
            str(r["collective"]),
            fmt_bytes(r["size"]),
            str(r.get("dtype", "")),
            fmt_seconds(r["step_time_s"]),
            interval_text(r["step_time_ci95_lo"], r["step_time_ci95_hi"]),
            str(r["trials_count"]),
            fmt_num(numeric(rows.loc[[i]], "algbw_gbps").iloc[0]),
            fmt_num(r["bw"]),
        ]
        for i, r in rows.sort_values(["run", "collective", "size"]).iterrows()
    ]
    part.tables.append(
        Table(
            [
                "run",
                "benchmark",
                "collective",
                "size",
                "dtype",
                "time per call",
                "95% CI",
                "trials",
                "algbw GB/s",
                "busbw GB/s",
            ],
            table,
        )
    )
    return part
