"""The views of one suite: headline numbers, throughput, scaling, step times, bandwidth.

Every function takes one suite's rows of the frame (every run) and the run names, and returns
a :class:`Part`, or None when the suite holds nothing it shows. No case is ever dropped: each
figure has a row per case (one bar or box per run) and each table a row per benchmark and run.
Phases, memory and timelines live in :mod:`dpbench.report.plots_resources`.
"""
from __future__ import annotations

import math

import matplotlib.ticker
import pandas as pd

from dpbench.report.figures import (Image, Part, Table, case_order, numeric, panels, plain_log_ticks, png,
                                    row_heights, run_colors, run_offsets, title)
from dpbench.results.units import fmt_bytes, fmt_num, fmt_pct, fmt_seconds

__all__ = ["busbw", "headline", "scaling", "step_times", "throughput", "workloads"]


def workloads(rows: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """``(workload, its rows)``: one figure panel each (collectives and plain benchmarks: "")."""
    key = rows["workload"].fillna("").astype(str)
    return [(w, rows[key == w]) for w in dict.fromkeys(key)]


def _interval(lo: float, hi: float, fmt=fmt_seconds) -> str:
    return "–" if math.isnan(lo) or math.isnan(hi) else f"{fmt(lo)} – {fmt(hi)}"


# ---------------------------------------------------------------- headline numbers
def headline(rows: pd.DataFrame, runs: list[str]) -> Part:
    part = Part(key="headline", title="Headline numbers",
                description="Per case: the median over trials (fresh worker processes) of each trial's median "
                            "time per step (per call for collectives), with its 95% interval from the trials; "
                            "samples/s = global batch / that time. Between-trial CV: how much a whole case moves "
                            "from process to process. Control: the fixed computation each trial timed in its own "
                            "workers (it moves when the machine does).")
    extra = [c for c in ("scaling_efficiency", "relative_to_ddp") if numeric(rows, c).notna().any()]
    columns = ["run", "workload", "case", "benchmark", "trials", "time", "95% CI", "samples/s", "samples/s 95% CI",
               "between-trial CV", "control", "control CV"] + extra
    # Suite metrics come straight from extra_info: anything but a number reads as missing.
    metrics = {c: numeric(rows, c) for name in extra for c in (name, f"{name}_ci95_lo", f"{name}_ci95_hi")}
    table = []
    for _, r in rows.iterrows():
        cells = [str(r["run"]), str(r["workload"] or "–"), str(r["case"]), str(r["name"]), str(r["trials_count"]),
                 f"{fmt_seconds(r['step_time_s'])}{r['unit'].removeprefix('s')}",
                 _interval(r["step_time_ci95_lo"], r["step_time_ci95_hi"]), fmt_num(r["samples_per_s"]),
                 _interval(r["samples_per_s_ci95_lo"], r["samples_per_s_ci95_hi"], fmt_num),
                 fmt_pct(r["trial_cv"]), fmt_seconds(r["control_median_s"]), fmt_pct(r["control_cv"])]
        for c in extra:
            value, lo, hi = (metrics[k].loc[r.name] for k in (c, f"{c}_ci95_lo", f"{c}_ci95_hi"))
            ci = "" if math.isnan(lo) else f" ({lo:.3g}–{hi:.3g})"
            cells.append("–" if math.isnan(value) else f"{value:.3g}{ci}")
        if isinstance(r.get("incomparable"), str):
            cells[5] = f"unknown: {r['incomparable']}"
        table.append(cells)
    part.tables.append(Table(columns, table))
    return part


# ---------------------------------------------------------------- throughput
def throughput(rows: pd.DataFrame, runs: list[str]) -> Part | None:
    rows = rows[rows["kind"].fillna("training") != "collective"]
    values = numeric(rows, "samples_per_s")
    if rows.empty or not values.notna().any():
        return None
    part = Part(key="throughput", title="Throughput",
                description="Samples per second (global batch / median step time over trials), with the 95% "
                            "interval from the trials as error bars. One panel per workload. Higher is better.")
    groups = workloads(rows)
    heights = row_heights((len(case_order(g)) * len(runs) for _, g in groups), per_row=0.22)
    fig, axes = panels(heights, labels=rows["case"])
    colors, (offsets, thickness) = run_colors(runs), run_offsets(runs)
    for (ax,), (workload, group) in zip(axes, groups):
        cases = case_order(group)
        position = {c: i for i, c in enumerate(cases)}
        for run in runs:
            mine = group[group["run"] == run]
            value = numeric(mine, "samples_per_s")
            ok = value > 0
            lo, hi = numeric(mine, "samples_per_s_ci95_lo"), numeric(mine, "samples_per_s_ci95_hi")
            err = [(value - lo).where(lo > 0, 0.0)[ok], (hi - value).where(hi > 0, 0.0)[ok]]
            ys = [position[c] + offsets[run] for c in mine["case"][ok]]
            ax.barh(ys, value[ok], height=thickness, xerr=err, color=colors[run], label=run, capsize=2)
        ax.set_yticks(range(len(cases)), cases)
        ax.set_ylim(len(cases) - 0.5, -0.5)
        title(ax, f"workload: {workload}" if workload else "")
        ax.set_xlabel("samples/s")
    if len(runs) > 1:  # one legend above the first panel: colours mean the same in every panel
        axes[0][0].legend(fontsize="small", loc="lower left", bbox_to_anchor=(0.0, 1.06), ncols=min(4, len(runs)))
    part.images.append(Image(title="throughput", png_b64=png(fig)))
    part.tables.append(_throughput_table(rows))
    return part


def _throughput_table(rows: pd.DataFrame) -> Table:
    """Samples/s per case, and against single of the same run (the summary pairs the trials)."""
    value = numeric(rows, "samples_per_s")
    singles = rows.assign(v=value)[rows["strategy"] == "single"]
    single = singles.groupby(["run", singles["workload"].fillna("")])["v"].first()
    table = []
    for (_, r), v in zip(rows.iterrows(), value):
        base = single.get((r["run"], r["workload"] or ""), math.nan)
        table.append([str(r["run"]), str(r["workload"] or "–"), str(r["case"]), str(r["name"]), fmt_num(v),
                      _interval(r["samples_per_s_ci95_lo"], r["samples_per_s_ci95_hi"], fmt_num),
                      fmt_num(v / base, suffix="×")])
    return Table(["run", "workload", "case", "benchmark", "samples/s", "95% CI", "vs single (medians)"], table)


# ---------------------------------------------------------------- scaling
def scaling(rows: pd.DataFrame, runs: list[str]) -> Part | None:
    eff = numeric(rows, "scaling_efficiency")
    ws = numeric(rows, "world_size")
    rows = rows.assign(efficiency=eff, ws=ws, eff_lo=numeric(rows, "scaling_efficiency_ci95_lo"),
                       eff_hi=numeric(rows, "scaling_efficiency_ci95_hi"),
                       single=numeric(rows, "baseline_samples_per_s"))[eff.notna() & ws.notna()]
    if rows.empty:
        return None
    part = Part(key="scaling", title="Scaling efficiency",
                description="Throughput at world size N / (N × single's throughput on one replica's batch), median "
                            "over trials paired by trial index, with its 95% interval as error bars. The dashed "
                            "line is ideal linear scaling.")
    groups = workloads(rows)
    fig, axes = panels([3.0] * len(groups), width=10, right=3.2)
    colors = run_colors(runs)
    styles = ["-", "--", ":", "-."]
    for (ax,), (workload, group) in zip(axes, groups):
        for i, (strategy, series) in enumerate(group.groupby("strategy_label", sort=False)):
            for run, line in series.groupby("run", sort=False):
                line = line.sort_values("ws")
                err = [(line["efficiency"] - line["eff_lo"]).fillna(0).clip(lower=0),
                       (line["eff_hi"] - line["efficiency"]).fillna(0).clip(lower=0)]
                label = f"{strategy} · {run}" if len(runs) > 1 else strategy
                ax.errorbar(line["ws"], line["efficiency"], yerr=err, marker="o", capsize=3, color=colors[str(run)],
                            linestyle=styles[i % len(styles)], label=label)
        ax.axhline(1.0, linestyle="--", color="black", linewidth=1)
        ax.set_xticks(sorted(group["ws"].unique()))
        ax.set_ylim(bottom=0)
        ax.set_xlabel("world size")
        ax.set_ylabel("efficiency")
        title(ax, f"workload: {workload}" if workload else "")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    part.images.append(Image(title="scaling efficiency", png_b64=png(fig)))
    table = []
    for _, r in rows.sort_values(["run", "workload", "strategy_label", "ws"]).iterrows():
        table.append([str(r["run"]), str(r["workload"]), str(r["strategy_label"]), fmt_num(r["ws"]), str(r["name"]),
                      fmt_num(r["samples_per_s"]), fmt_num(r["single"]), f"{r['efficiency']:.1%}",
                      "–" if math.isnan(r["eff_lo"]) else f"{r['eff_lo']:.1%} – {r['eff_hi']:.1%}"])
    part.tables.append(Table(["run", "workload", "strategy", "world size", "benchmark", "samples/s",
                              "single samples/s", "efficiency", "95% CI"], table))
    return part


# ---------------------------------------------------------------- step times
def _positive(values) -> list[float]:
    return [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v) and v > 0] \
        if isinstance(values, list) else []


def step_times(rows: pd.DataFrame, runs: list[str]) -> Part | None:
    has = rows["step_samples"].map(bool) | rows["trial_times"].map(bool)
    if not has.any():
        return None
    part = Part(key="step-times", title="Step-time distributions",
                description="Every measured round (boxes, seconds per step or per call, all trials) and each "
                            "trial's median (dots): the boxes show the noise inside a process, the dots how much "
                            "a whole case moves between processes.")
    groups = workloads(rows)
    heights = row_heights((len(case_order(g)) * len(runs) for _, g in groups), per_row=0.22)
    fig, axes = panels(heights, labels=rows["case"])
    colors, (offsets, thickness) = run_colors(runs), run_offsets(runs)
    for (ax,), (workload, group) in zip(axes, groups):
        cases = case_order(group)
        position = {c: i for i, c in enumerate(cases)}
        for run in runs:
            mine = group[group["run"] == run]
            boxes = [([v * 1e3 for v in _positive(r)], position[c] + offsets[run])
                     for r, c in zip(mine["step_samples"], mine["case"])]
            boxes = [(values, y) for values, y in boxes if values]
            if boxes:  # one call per run: a boxplot call per case costs as much as the whole figure
                drawn = ax.boxplot([values for values, _ in boxes], positions=[y for _, y in boxes],
                                   widths=thickness * 0.9, orientation="horizontal", showfliers=False,
                                   patch_artist=True, manage_ticks=False)
                for patch in drawn["boxes"]:
                    patch.set_facecolor(colors[run])
                    patch.set_alpha(0.6)
            xs, ys = [], []
            for trials, c in zip(mine["trial_times"], mine["case"]):
                xs += [v * 1e3 for v in _positive(trials)]
                ys += [position[c] + offsets[run]] * len(_positive(trials))
            ax.plot(xs, ys, "o", color="black", markersize=3, linestyle="none")
        ax.set_yticks(range(len(cases)), cases)
        ax.set_ylim(len(cases) - 0.5, -0.5)
        ax.set_xscale("log")
        plain_log_ticks(ax.xaxis)
        ax.set_xlabel("ms per step (per call)")
        title(ax, f"workload: {workload}" if workload else "")
    part.images.append(Image(title="step-time distributions", png_b64=png(fig)))
    table = []
    for _, r in rows.iterrows():
        rounds = pd.Series(_positive(r["step_samples"]), dtype=float)
        table.append([str(r["run"]), str(r["workload"] or "–"), str(r["case"]), str(r["name"]), str(len(rounds)),
                      str(r["trials_count"]), fmt_seconds(r["step_time_s"]), fmt_pct(r["trial_cv"]),
                      fmt_seconds(rounds.quantile(0.95)) if len(rounds) else "–",
                      fmt_seconds(rounds.min()), fmt_seconds(rounds.max())])
    part.tables.append(Table(["run", "workload", "case", "benchmark", "rounds", "trials", "median of trials",
                              "between-trial CV", "rounds p95", "rounds min", "rounds max"], table))
    return part


# ---------------------------------------------------------------- bus bandwidth
def busbw(rows: pd.DataFrame, runs: list[str]) -> Part | None:
    rows = rows[rows["kind"] == "collective"].assign(size=lambda f: numeric(f, "size_bytes"),
                                                      bw=lambda f: numeric(f, "busbw_gbps"))
    if rows.empty:
        return None
    part = Part(key="busbw", title="Communication bandwidth",
                description="Bus bandwidth (nccl-tests formula, from the median time per call over trials) "
                            "against message size, per collective and world size.")
    plotted = rows[(rows["size"] > 0) & (rows["bw"] > 0)]  # log axis: positive sizes only
    if plotted.empty:
        part.note = "No finite message sizes and bandwidths to plot."
    else:
        fig, [[ax]] = panels([3.5], width=10, right=3.2)
        colors = run_colors(runs)
        series = (plotted["collective"].astype(str) + " w" + plotted["world_size"].astype(str) + " "
                  + plotted["backend"].fillna("").astype(str))
        for (name, run), line in plotted.assign(series=series).groupby(["series", "run"], sort=False):
            line = line.sort_values("size")
            ax.plot(line["size"], line["bw"], marker="o", color=colors[str(run)],
                    label=f"{name} · {run}" if len(runs) > 1 else name)
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: fmt_bytes(v)))
        ax.set_xlabel("message size")
        ax.set_ylabel("busbw GB/s")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
        part.images.append(Image(title="bus bandwidth", png_b64=png(fig)))
    table = [[str(r["run"]), str(r["name"]), str(r["collective"]), fmt_bytes(r["size"]), str(r.get("dtype", "")),
              fmt_seconds(r["step_time_s"]), _interval(r["step_time_ci95_lo"], r["step_time_ci95_hi"]),
              str(r["trials_count"]), fmt_num(numeric(rows.loc[[i]], "algbw_gbps").iloc[0]), fmt_num(r["bw"])]
             for i, r in rows.sort_values(["run", "collective", "size"]).iterrows()]
    part.tables.append(Table(["run", "benchmark", "collective", "size", "dtype", "time per call", "95% CI", "trials",
                              "algbw GB/s", "busbw GB/s"], table))
    return part
