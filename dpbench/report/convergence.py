"""The "Time to accuracy" view of the convergence suite: test accuracy per epoch (d2l's Animator
plot, one line per strategy), seconds per epoch with the trials' 95% interval, a table in d2l's
words ("ddp w2: test acc 0.84, 2.1 sec/epoch"), time to the target, and the parity verdict.

Everything shown was measured and written by :mod:`dpbench.measure.convergence`
(``extra_info["convergence"]``, flattened by the frame to ``convergence.*`` columns); the only
arithmetic here is the spread of final accuracies between the strategies of one recipe, which
the verdict compares with the recipe's own ``parity_tolerance``.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from dpbench.report.figures import Image, Part, Table, numeric, panels, row_heights, svg, title
from dpbench.results.units import fmt_seconds

__all__ = ["time_to_accuracy", "parity_verdict", "d2l_line"]

_CURVE = "convergence.test_accuracy"
_KEY = "time-to-accuracy"


def _list(value: Any) -> list[float]:
    if not isinstance(value, (list, tuple)):
        return []
    out = []
    for v in value:
        out.append(float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan)
    return out


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan


def _accuracy(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:.3f}"


def d2l_line(case: str, accuracy: float, sec_per_epoch: float) -> str:
    """``"ddp w2: test acc 0.84, 2.1 sec/epoch"`` — how d2l reports a run."""
    sec = "–" if math.isnan(sec_per_epoch) else f"{sec_per_epoch:.3g}"
    acc = "–" if math.isnan(accuracy) else f"{accuracy:.2f}"
    return f"{case}: test acc {acc}, {sec} sec/epoch"


def parity_verdict(finals: dict[str, float], tolerance: float | None) -> str:
    """One sentence: the largest final-accuracy gap between the strategies and whether it is noise."""
    finals = {case: acc for case, acc in finals.items() if not math.isnan(acc)}
    if len(finals) < 2:
        return "one strategy only: nothing to compare"
    best, worst = max(finals, key=finals.get), min(finals, key=finals.get)
    gap = finals[best] - finals[worst]
    if gap == 0:
        text = f"all {len(finals)} strategies reached the same final test accuracy, {finals[best]:.4f} (gap 0 pp)"
    else:
        text = (
            f"largest final test-accuracy gap {gap * 100:.2f} pp ({best} {finals[best]:.4f} vs {worst} "
            f"{finals[worst]:.4f}, {len(finals)} strategies)"
        )
    if tolerance is None:
        return text + ": no parity expected (the model keeps per-replica state, e.g. BatchNorm)"
    if gap <= tolerance:
        return text + f": within float noise (≤ {tolerance * 100:.2f} pp)"
    return text + f": BEYOND float noise (> {tolerance * 100:.2f} pp) — the strategies did not train the same model"


def _groups(rows: pd.DataFrame) -> list[tuple[tuple[str, str], pd.DataFrame]]:
    recipe = rows["convergence.recipe"].fillna("").astype(str)
    keys = list(dict.fromkeys(zip(rows["run"].astype(str), recipe)))
    return [((run, rec), rows[(rows["run"].astype(str) == run) & (recipe == rec)]) for run, rec in keys]


_STYLES = ["-", "--", "-.", ":"]


def _curves(groups: list[tuple[tuple[str, str], pd.DataFrame]], multi_run: bool) -> Image:
    fig, axes = panels([2.8] * len(groups), right=2.6, labels=["0.95"])
    for (ax,), ((run, recipe), group) in zip(axes, groups):
        cases = list(group["case"].astype(str))
        for i, (case, (_, r)) in enumerate(zip(cases, group.iterrows())):
            curve = _list(r[_CURVE])
            # Strategies that train the same model draw the same curve: shrinking markers and
            # changing dashes keep every coinciding line visible.
            ax.plot(
                range(1, len(curve) + 1),
                curve,
                linestyle=_STYLES[i % len(_STYLES)],
                marker="o",
                markersize=max(2.0, 8.0 - 0.8 * i),
                label=case,
            )
        target = numeric(group, "convergence.target_accuracy").dropna()
        if not target.empty:
            ax.axhline(float(target.iloc[0]), color="grey", linestyle=":", linewidth=1)
        ax.set_xlabel("epoch")
        ax.set_ylabel("test accuracy")
        title(ax, f"{run} · {recipe}" if multi_run else recipe)
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return svg(fig, "test accuracy per epoch")


def _epoch_times(groups: list[tuple[tuple[str, str], pd.DataFrame]], multi_run: bool) -> Image:
    heights = row_heights((len(g) for _, g in groups), per_row=0.25)
    fig, axes = panels(heights, labels=[str(c) for _, g in groups for c in g["case"]])
    for (ax,), ((run, recipe), group) in zip(axes, groups):
        cases = list(group["case"].astype(str))
        secs = numeric(group, "convergence.sec_per_epoch")
        intervals = (
            [_list(v) for v in group["convergence.sec_per_epoch_ci95"]]
            if "convergence.sec_per_epoch_ci95" in group
            else [[] for _ in cases]
        )
        lo = [s - iv[0] if len(iv) == 2 else 0.0 for s, iv in zip(secs, intervals)]
        hi = [iv[1] - s if len(iv) == 2 else 0.0 for s, iv in zip(secs, intervals)]
        ax.barh(range(len(cases)), secs.fillna(0.0), xerr=[lo, hi], capsize=2, color="#4c72b0")
        ax.set_yticks(range(len(cases)), cases)
        ax.set_ylim(len(cases) - 0.5, -0.5)
        ax.set_xlabel("seconds per epoch (median over trials, 95% interval)")
        title(ax, f"{run} · {recipe}" if multi_run else recipe)
    return svg(fig, "seconds per epoch")


def _case_row(r: pd.Series) -> list[str]:
    curve = _list(r[_CURVE])
    final = curve[-1] if curve else math.nan
    sec = _number(r.get("convergence.sec_per_epoch"))
    ci = _list(r.get("convergence.sec_per_epoch_ci95"))
    target = _number(r.get("convergence.target_accuracy"))
    reached = _number(r.get("convergence.epochs_to_target"))
    to_target = _number(r.get("convergence.time_to_target_s"))
    gap = _number(r.get("convergence.accuracy_gap_to_reference"))
    if math.isnan(target):
        ttt = "no target"
    elif math.isnan(reached):
        ttt = f"not reached ({_accuracy(target)})"
    else:
        ttt = f"{fmt_seconds(to_target)} (epoch {reached:.0f}, ≥ {_accuracy(target)})"
    train_loss = _list(r.get("convergence.train_loss"))
    return [
        str(r["run"]),
        str(r.get("convergence.recipe")),
        d2l_line(str(r["case"]), final, sec),
        _accuracy(final),
        "–" if not train_loss else f"{train_loss[-1]:.4f}",
        fmt_seconds(sec),
        f"{fmt_seconds(ci[0])} – {fmt_seconds(ci[1])}" if len(ci) == 2 else "–",
        "–"
        if math.isnan(_number(r.get("convergence.epoch_samples_per_s")))
        else f"{_number(r.get('convergence.epoch_samples_per_s')):,.0f}",
        ttt,
        "–" if math.isnan(gap) else f"{gap * 100:+.2f} pp",
        str(r.get("trials_count", "–")),
    ]


def time_to_accuracy(rows: pd.DataFrame, runs: list[str]) -> Part | None:
    """The part for one suite's rows; None when none of them carries an accuracy curve."""
    if _CURVE not in rows or not rows[_CURVE].map(lambda v: bool(_list(v))).any():
        return None
    rows = rows[rows[_CURVE].map(lambda v: bool(_list(v)))]
    part = Part(
        key=_KEY,
        title="Time to accuracy",
        description="Each strategy trained the recipe for whole epochs from the same seed and the same global "
        "batches; after every epoch rank 0 evaluated a fresh copy of the model loaded with the "
        "trained parameters on the test split (untimed). sec/epoch: the sum of the epoch's "
        "synchronised step times (slowest rank), averaged over epochs (d2l's timer.avg()), median "
        "over fresh-process trials with its 95% interval. Time to target: training seconds up to "
        "the first epoch whose test accuracy reaches the target (dotted line).",
    )
    rows = rows.assign(
        case=[
            f"{r['strategy']} w{r['world_size']}" if r.get("strategy") else str(r["case"]) for _, r in rows.iterrows()
        ]
    )
    groups = _groups(rows)
    part.images += [_curves(groups, len(runs) > 1), _epoch_times(groups, len(runs) > 1)]
    columns = [
        "run",
        "recipe",
        "in d2l's words",
        "final test acc",
        "final train loss",
        "sec/epoch",
        "95% CI",
        "samples/s",
        "time to target",
        "gap to single",
        "trials",
    ]
    part.tables.append(Table(columns, [_case_row(r) for _, r in rows.iterrows()]))
    verdicts = []
    for (run, recipe), group in groups:
        finals = {str(r["case"]): (_list(r[_CURVE]) or [math.nan])[-1] for _, r in group.iterrows()}
        tolerance = numeric(group, "convergence.parity_tolerance").dropna()
        verdict = parity_verdict(finals, float(tolerance.iloc[0]) if not tolerance.empty else None)
        verdicts.append([run, recipe, verdict])
    part.tables.append(Table(["run", "recipe", "parity verdict"], verdicts))
    part.note = "Parity: " + "; ".join(f"{recipe}: {v}" for _, recipe, v in verdicts)
    return part
