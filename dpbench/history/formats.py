"""``dpbench history``'s machine-readable (``--json``) and job-summary (``--markdown``) output."""

from __future__ import annotations

import math
from typing import Any

from dpbench.history.series import History, Series, SeriesChange
from dpbench.results.units import fmt_p, fmt_ratio
from dpbench.stats import or_none

__all__ = ["history_json", "history_markdown"]


def _num(value: float) -> float | None:
    return or_none(float(value)) if value is not None else None


def change_json(series: Series, c: SeriesChange) -> dict[str, Any]:
    ch = c.change
    return {
        "benchmark": series.name,
        "machine": series.machine,
        "key": series.key,
        "commit": c.commit,
        "commit_range": list(c.commit_range),
        "before_s": _num(ch.before.median_s),
        "after_s": _num(ch.after.median_s),
        "before_ci95": [_num(ch.before.lo_s), _num(ch.before.hi_s)],
        "after_ci95": [_num(ch.after.lo_s), _num(ch.after.hi_s)],
        "ratio": _num(ch.ratio),
        "p": _num(ch.p),
        "direction": ch.direction,
        "steps": len(ch.steps),
        "control_ratio": _num(c.control_ratio),
        "accepted": c.accepted is not None,
        "accepted_reason": c.accepted.reason if c.accepted else None,
    }


def _series_json(s: Series) -> dict[str, Any]:
    points = []
    for p in s.points:
        lo, hi = p.interval
        points.append(
            {
                "commit": p.commit,
                "date": p.date,
                "median_s": _num(p.median_s),
                "ci95": [_num(lo), _num(hi)],
                "trials": p.trials,
                "controls": p.controls,
                "runs": p.runs,
            }
        )
    return {
        "benchmark": s.name,
        "fullname": s.fullname,
        "machine": s.machine,
        "key": s.key,
        "suite": s.suite,
        "workload": s.workload,
        "unit": s.unit,
        "claimed": s.found.claimed,
        "steps": [
            {"commit": s.points[st.index].commit, "ratio": _num(st.ratio), "p": _num(st.p)} for st in s.found.steps
        ],
        "events": [{"commit": s.points[i].commit, "change": text} for i, text in s.events],
        "points": points,
    }


def history_json(history: History) -> dict[str, Any]:
    return {
        "order": history.order,
        "order_note": history.order_note,
        "threshold": history.threshold,
        "alpha": history.alpha,
        "commits": history.commits,
        "changes": [change_json(s, c) for s, c in history.changes()],
        "series": [_series_json(s) for s in history.series],
        "skipped": [{"path": p, "error": e} for p, e in history.skipped],
    }


def _short(commit: str) -> str:
    return commit[:10]


def history_markdown(history: History, *, newest: int = 0) -> str:
    """The regressions (newest first), improvements counted, skipped files named."""
    changes = history.changes()
    regressions = [(s, c) for s, c in changes if c.direction == "regression"]
    new = {id(c) for _, c in history.new_regressions(newest)} if newest else set()
    lines = [
        "## dpbench history",
        "",
        f"{len(history.series)} series over {len(history.commits)} commits, {history.order_note}; "
        f"{len(regressions)} regressions ({sum(c.accepted is not None for _, c in regressions)} accepted), "
        f"{len(changes) - len(regressions)} improvements (threshold {history.threshold:.0%}, "
        f"p < {history.alpha:g}).",
    ]
    if regressions:
        lines += [
            "",
            "| benchmark | machine | commits | before → after | change | p | |",
            "|---|---|---|---|---|---|---|",
        ]
        for s, c in regressions:
            ch = c.change
            mark = ("accepted: " + c.accepted.reason) if c.accepted else ("**new**" if id(c) in new else "")
            if not math.isnan(c.control_ratio) and abs(c.control_ratio - 1) > history.threshold:
                mark = "; ".join(filter(None, [mark, f"control moved {fmt_ratio(c.control_ratio)}"]))
            lines.append(
                f"| `{s.name}` | {s.machine} | {_short(c.commit_range[0])}..{_short(c.commit_range[1])} | "
                f"{ch.before.median_s * 1e3:.3g} ms → {ch.after.median_s * 1e3:.3g} ms | "
                f"{fmt_ratio(ch.ratio)} | {fmt_p(ch.p, digits=1)} | {mark} |"
            )
    for path, error in history.skipped:
        lines.append(f"\n> skipped {path}: {error}")
    return "\n".join(lines) + "\n"
