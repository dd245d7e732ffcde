"""The step-time view of one suite: every measured round and each trial's median, per case and run.

Same contract as :mod:`dpbench.report.plots`: one suite's rows in, a :class:`Part` (or None when no
case holds step times) out, every case of every run in the figure and the table. The boxes show the
noise inside a process, the dots how much a whole case moves between processes; the boxes are drawn
as a few collections rather than matplotlib's boxplot, which made the report slow.
"""

from __future__ import annotations

import math

import pandas as pd

from dpbench.report.figures import (
    Part,
    Table,
    case_order,
    category_labels,
    hbars,
    panels,
    plain_log_ticks,
    row_heights,
    run_offsets,
    strategy_color,
    strategy_legend,
    svg,
    title,
    two_runs,
)
from dpbench.report.plots_rows import suites_text, workload_text, workloads
from dpbench.results.units import fmt_pct, fmt_seconds
from dpbench.stats import percentile

__all__ = ["step_times"]


def _positive(values) -> list[float]:
    return (
        [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v) and v > 0]
        if isinstance(values, list)
        else []
    )


def _draw_boxes(ax, boxes: list[tuple[list[float], float, tuple]], height: float, *, filled: bool) -> None:
    """Box plots (quartiles, median, whiskers to the furthest round within 1.5 IQR) drawn with one
    bar, one whisker and one median collection per call: matplotlib's boxplot makes six artists
    per box, and with a box per configuration and run they dominated the report's time."""
    from matplotlib.collections import LineCollection

    if not boxes:
        return
    stats = []
    for values, y, color in boxes:
        ms = [v * 1e3 for v in values]
        q1, q2, q3 = (percentile(ms, q) for q in (25, 50, 75))
        reach = 1.5 * (q3 - q1)
        lo = min(v for v in ms if v >= q1 - reach)
        hi = max(v for v in ms if v <= q3 + reach)
        stats.append((q1, q2, q3, lo, hi, y, color))
    q1, q2, q3, lo, hi, ys, colors = zip(*stats)
    hbars(
        ax,
        ys,
        [b - a for a, b in zip(q1, q3)],
        left=list(q1),
        height=height,
        color=list(colors) if filled else "white",
        edgecolor=list(colors),
        linewidth=1.0,
        alpha=0.75 if filled else 1.0,
    )
    whiskers = [[(a, y), (q, y)] for a, q, y in zip(lo, q1, ys)] + [[(q, y), (b, y)] for q, b, y in zip(q3, hi, ys)]
    medians = [[(m, y - height / 2), (m, y + height / 2)] for m, y in zip(q2, ys)]
    ax.add_collection(LineCollection(whiskers, colors=list(colors) * 2, linewidths=1.0))
    ax.add_collection(LineCollection(medians, colors="black", linewidths=1.2))


def step_times(rows: pd.DataFrame, runs: list[str]) -> Part | None:
    has = rows["step_samples"].map(bool) | rows["trial_times"].map(bool)
    if not has.any():
        return None
    shown = list(dict.fromkeys(two_runs(runs)))
    part = Part(
        key="step-times",
        title="Step-time distributions",
        description="Every measured round (boxes: quartiles and median; whiskers: the furthest round "
        "within 1.5 IQR; ms per step or per call, all trials) and each trial's median (dots): "
        "the boxes show the noise inside a process, the dots how much a whole "
        "case moves between processes; red crosses: disturbed trials (the machine was busy), left out of "
        "every estimate or replaced by a re-measurement. Colour = strategy"
        + ("; filled: the newest run, hollow: the first (runs in between are in the table)." if len(runs) > 1 else "."),
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
            newest = run == shown[-1]
            boxes = [
                (_positive(r), position[c] + offsets[run], strategy_color(s))
                for r, c, s in zip(mine["step_samples"], mine["case"], mine["strategy"])
            ]
            _draw_boxes(ax, [b for b in boxes if b[0]], thickness * 0.85, filled=newest)
            xs, ys = [], []
            for trials, c in zip(mine["trial_times"], mine["case"]):
                xs += [v * 1e3 for v in _positive(trials)]
                ys += [position[c] + offsets[run]] * len(_positive(trials))
            ax.plot(xs, ys, "o", color="black", markersize=2.5, linestyle="none")
            # Disturbed trials (dpbench.results.disturbed): crossed; no estimate uses one left out or replaced.
            dx, dy = [], []
            for found, c in zip(mine["disturbed"] if "disturbed" in mine else [], mine["case"]):
                for d in found if isinstance(found, list) else []:
                    if isinstance(d.get("step_time_s"), (int, float)) and d["step_time_s"] > 0:
                        dx.append(d["step_time_s"] * 1e3)
                        dy.append(position[c] + offsets[run])
            if dx:
                ax.plot(dx, dy, "x", color="#c0392b", markersize=4, linestyle="none")
        category_labels(ax, cases)
        ax.set_xscale("log")
        plain_log_ticks(ax.xaxis)
        ax.set_xlabel("ms per step (per call)")
        title(ax, f"workload: {workload}" if workload else "")
    strategy_legend(axes[0][0], rows["strategy"].where(rows["strategy"].notna(), rows["strategy_label"]), runs)
    part.images.append(svg(fig, "step-time distributions"))
    table = []
    for _, r in rows.iterrows():
        rounds = pd.Series(_positive(r["step_samples"]), dtype=float)
        table.append(
            [
                str(r["run"]),
                workload_text(r["workload"]),
                str(r["case"]),
                suites_text(r),
                str(len(rounds)),
                str(r["trials_count"]),
                fmt_seconds(r["step_time_s"]),
                fmt_pct(r["trial_cv"]),
                fmt_seconds(rounds.quantile(0.95)) if len(rounds) else "–",
                fmt_seconds(rounds.min()),
                fmt_seconds(rounds.max()),
            ]
        )
    part.tables.append(
        Table(
            [
                "run",
                "workload",
                "configuration",
                "suites",
                "rounds",
                "trials",
                "median of trials",
                "between-trial CV",
                "rounds p95",
                "rounds min",
                "rounds max",
            ],
            table,
        )
    )
    return part
