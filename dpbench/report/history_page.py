"""Render a :class:`dpbench.history.series.History` into one self-contained HTML page.

Plots are inline SVG written here (coordinates computed in Python, drawn by the template) rather
than matplotlib PNGs: 70 benchmarks x 500 commits must render in seconds (a matplotlib figure
costs ~0.1-0.2 s each, twice per benchmark with the control), and a polyline of 500 points is a
few kB where a readable PNG is tens. No scripts; autoescaped like the report.
"""

from __future__ import annotations

import datetime as _dt
import math
import zlib
from collections.abc import Sequence
from itertools import groupby
from pathlib import Path
from typing import Any

import jinja2

from dpbench.history.series import History, Series, SeriesChange
from dpbench.results.units import fmt_p, fmt_ratio
from dpbench.schema import __version__

__all__ = ["render_history_page"]

_TEMPLATES = Path(__file__).parent / "templates"
WIDTH, HEIGHT, CONTROL_HEIGHT, PAD = 880.0, 150.0, 40.0, 6.0


def _environment() -> jinja2.Environment:
    # autoescape=True: benchmark names, commits, machine fields and reasons are data, never markup.
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(_TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def _x(i: int, n: int) -> float:
    return PAD + (WIDTH - 2 * PAD) * (i / (n - 1) if n > 1 else 0.5)


def _scale(values: Sequence[float], height: float):
    """A log-scale y mapping over ``values`` (finite, positive), top = slowest."""
    finite = [math.log(v) for v in values if v and v > 0 and math.isfinite(v)]
    lo, hi = (min(finite), max(finite)) if finite else (0.0, 1.0)
    if hi - lo < 1e-9:
        lo, hi = lo - 0.05, hi + 0.05
    return lambda v: PAD + (height - 2 * PAD) * (1 - (math.log(v) - lo) / (hi - lo))


def _path(xy: Sequence[tuple[float, float]]) -> str:
    return " ".join(f"{x:.1f},{y:.1f}" for x, y in xy)


def _plot(s: Series, commits_url: str | None) -> dict[str, Any]:
    n = len(s.points)
    medians = [p.median_s for p in s.points]
    bands = [p.interval for p in s.points]
    y = _scale(medians + [v for b in bands for v in b if not math.isnan(v)], HEIGHT)
    line = [(_x(i, n), y(m)) for i, m in enumerate(medians)]
    upper = [(_x(i, n), y(b[1] if not math.isnan(b[1]) else m)) for i, (b, m) in enumerate(zip(bands, medians))]
    lower = [(_x(i, n), y(b[0] if not math.isnan(b[0]) else m)) for i, (b, m) in enumerate(zip(bands, medians))]
    controls = [sorted(p.controls)[len(p.controls) // 2] if p.controls else None for p in s.points]
    known = [c for c in controls if c]
    cy = _scale(known, CONTROL_HEIGHT)
    control_line = _path([(_x(i, n), cy(c)) for i, c in enumerate(controls) if c])
    levels = [
        {"x1": _x(seg.start, n), "x2": _x(seg.stop - 1, n), "y": y(seg.median_s)}
        for seg in s.found.segments
        if s.found.claimed
    ]
    marks = []
    for c in s.changes:
        marks.append(
            {
                "x": _x(c.change.first, n),
                "x1": _x(c.change.last_before, n),
                "x2": _x(c.change.first_after, n),
                "cls": "accepted" if c.accepted else c.direction,
                "title": f"{fmt_ratio(c.change.ratio)} at {c.commit[:10]} (p = {fmt_p(c.change.p, digits=1)})",
            }
        )
    return {
        "line": _path(line),
        "band": _path(upper + lower[::-1]),
        "control": control_line,
        "levels": levels,
        "marks": marks,
        "events": [{"x": _x(i, n), "title": text} for i, text in s.events],
        "top": f"{max(medians) * 1e3:.3g} ms",
        "bottom": f"{min(medians) * 1e3:.3g} ms",
        "first": s.points[0].commit[:10],
        "last": s.points[-1].commit[:10],
        "control_known": bool(known),
    }


def _link(url: str | None, a: str, b: str) -> str | None:
    return f"{url}/compare/{a}...{b}" if url else None


def _change_row(s: Series, c: SeriesChange, url: str | None) -> dict[str, Any]:
    ch = c.change
    control = "" if math.isnan(c.control_ratio) else f"control {fmt_ratio(c.control_ratio)}"
    return {
        "benchmark": s.name,
        "machine": s.machine,
        "anchor": _anchor(s),
        "range": f"{c.commit_range[0][:10]}..{c.commit_range[1][:10]}",
        "url": _link(url, *c.commit_range),
        "commit": c.commit[:10],
        "commit_url": f"{url}/commit/{c.commit}" if url else None,
        "before": f"{ch.before.median_s * 1e3:.3g} ms [{ch.before.lo_s * 1e3:.3g}, {ch.before.hi_s * 1e3:.3g}]",
        "after": f"{ch.after.median_s * 1e3:.3g} ms [{ch.after.lo_s * 1e3:.3g}, {ch.after.hi_s * 1e3:.3g}]",
        "change": fmt_ratio(ch.ratio),
        "p": fmt_p(ch.p, digits=1),
        "steps": len(ch.steps),
        "control": control,
        "accepted": c.accepted.reason if c.accepted else None,
        "direction": ch.direction,
    }


def _anchor(s: Series) -> str:
    return f"s{zlib.crc32(f'{s.machine}|{s.key}'.encode()):08x}"


def render_history_page(history: History, *, title: str = "dpbench history", repo_url: str | None = None) -> str:
    rows = [_change_row(s, c, repo_url) for s, c in history.changes()]
    ordered = sorted(history.series, key=lambda s: (s.suite, s.workload, s.machine, s.name))
    groups = []
    for (suite, workload), members in groupby(ordered, key=lambda s: (s.suite, s.workload)):
        groups.append(
            {
                "suite": suite,
                "workload": workload,
                "series": [
                    {
                        "name": s.name,
                        "machine": s.machine,
                        "anchor": _anchor(s),
                        "unit": s.unit,
                        "points": len(s.points),
                        "claimed": s.found.claimed,
                        "plot": _plot(s, repo_url),
                        "events": [text for _, text in s.events],
                    }
                    for s in members
                ],
            }
        )
    return (
        _environment()
        .get_template("history.html.j2")
        .render(
            title=title,
            version=__version__,
            order_note=history.order_note,
            generated=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            n_series=len(history.series),
            n_commits=len(history.commits),
            threshold=f"{history.threshold:.0%}",
            alpha=f"{history.alpha:g}",
            skipped=history.skipped,
            regressions=[r for r in rows if r["direction"] == "regression"],
            improvements=[r for r in rows if r["direction"] != "regression"],
            groups=groups,
            width=WIDTH,
            height=HEIGHT,
            control_height=CONTROL_HEIGHT,
        )
    )
