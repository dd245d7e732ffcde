"""Render saved runs into one self-contained HTML file (Jinja2, autoescaped, no scripts)."""
from __future__ import annotations

import datetime as _dt
import json
import math
import os
from pathlib import Path
from typing import Any, Sequence

import jinja2
import pandas as pd

from dpbench import __version__
from dpbench._atomic import atomic_write_text
from dpbench.report.compare import compare_frames, display_names
from dpbench.report.load import DEFAULT_RESULTS_DIR, ResultsError, Run, read_run, resolve_runs, runs_frame
from dpbench.report.plots import Section, Table, build_sections
from dpbench.report.units import fmt_num, fmt_ratio, fmt_seconds

__all__ = ["render_report", "write_report"]

_TEMPLATES = Path(__file__).parent / "templates"


def _environment() -> jinja2.Environment:
    # autoescape=True for every template: each string from a results file (benchmark names,
    # params, machine_info) is data and must never become markup in the report.
    return jinja2.Environment(loader=jinja2.FileSystemLoader(_TEMPLATES), autoescape=True,
                              undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)


def _text(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


def _provenance(run: Run, short_name: str) -> dict[str, Any]:
    m, c = run.machine_info, run.commit_info
    gpus = m.get("gpus") if isinstance(m.get("gpus"), list) else []
    gpu_text = ", ".join(_text(g.get("name")) for g in gpus if isinstance(g, dict)) or "none"
    dp = m.get("dpbench") if isinstance(m.get("dpbench"), dict) else {}
    cpu = m.get("cpu") if isinstance(m.get("cpu"), dict) else {}
    commit = f"{_text(c.get('id'))} on {_text(c.get('branch'))}" + (" (dirty)" if c.get("dirty") else "")
    fields = [
        ("file", str(run.path)), ("saved", run.datetime), ("pytest-benchmark", run.version), ("commit", commit),
        ("host", m.get("node")), ("cpu", cpu.get("brand_raw")), ("cpu count", m.get("cpu_count", cpu.get("count"))),
        ("gpus", gpu_text), ("driver", m.get("driver")), ("cuda", m.get("cuda")), ("nccl", m.get("nccl")),
        ("torch", m.get("torch")), ("python", m.get("python_version")),
        ("dpbench", dp.get("version")), ("lock hash", dp.get("lock_hash")), ("profile", dp.get("profile")),
        ("threads per worker", m.get("threads_per_worker")),
    ]
    return {"name": short_name, "fields": [(k, _text(v)) for k, v in fields],
            "machine_json": json.dumps(m, indent=1, sort_keys=True, default=str)}


def _winners(frame: pd.DataFrame) -> Table:
    rows = frame[(frame["kind"].fillna("training") != "collective") & frame["workload"].notna()].copy()
    rows["throughput"] = pd.to_numeric(rows.get("global_batch"), errors="coerce") / rows["step_time_median"]
    rows = rows[rows["throughput"].notna()]
    table = []
    for (run, workload), group in rows.groupby(["run", "workload"], sort=True):
        best = group.loc[group["throughput"].idxmax()]
        single = group.loc[group["strategy"] == "single", "throughput"]
        ratio = best["throughput"] / single.max() if not single.empty else math.nan
        table.append([str(run), str(workload), str(best["label"]), fmt_num(best["throughput"]),
                      fmt_num(ratio, suffix="×")])
    return Table(["run", "workload", "fastest case", "samples/s", "vs single"], table)


def _comparisons(frame: pd.DataFrame, runs: Sequence[str]) -> list[dict[str, Any]]:
    """Each later run against the first, benchmark by benchmark (ratios of median step times)."""
    out = []
    base = frame[frame["run"] == runs[0]]
    for other in runs[1:]:
        entry: dict[str, Any] = {"baseline": runs[0], "candidate": other, "note": None, "warnings": [],
                                 "table": Table([], [])}
        try:
            cmp = compare_frames(base, frame[frame["run"] == other], baseline_name=runs[0], candidate_name=other)
        except ResultsError as e:
            entry["note"] = str(e)
            out.append(entry)
            continue
        entry["warnings"] = cmp.warnings
        rows = []
        names = display_names([b.name for b in cmp.benchmarks])
        for b in cmp.benchmarks:
            speedup = 1 / b.ratio if b.ratio and not math.isnan(b.ratio) else math.nan
            rows.append([names[b.name], fmt_seconds(b.baseline_median_s), fmt_seconds(b.candidate_median_s),
                         fmt_num(b.ratio, suffix="×"), fmt_ratio(speedup), "–" if math.isnan(b.p_value) else f"{b.p_value:.2g}",
                         b.status])
        entry["table"] = Table(["benchmark", f"{runs[0]} /step", f"{other} /step", "time ratio",
                                "throughput change", "p", "status"], rows)
        out.append(entry)
    return out


def render_report(runs: Sequence[Run], *, title: str = "dpbench report") -> str:
    """The HTML text of a report over ``runs`` (as returned by :func:`read_run`)."""
    if not runs:
        raise ResultsError("no runs to report on")
    frame = runs_frame(runs)
    run_names = list(dict.fromkeys(frame["run"]))
    sections: list[Section] = build_sections(frame)
    template = _environment().get_template("report.html.j2")
    return template.render(
        title=title,
        generated=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        version=__version__,
        run_names=run_names,
        n_benchmarks=len(frame),
        winners=_winners(frame),
        sections=sections,
        comparisons=_comparisons(frame, run_names) if len(run_names) > 1 else [],
        provenance=[_provenance(r, n) for r, n in zip(runs, run_names)],
    )


def write_report(
    runs: Sequence[str | os.PathLike] = (),
    output: str | os.PathLike = "report.html",
    *,
    results_dir: str | os.PathLike = DEFAULT_RESULTS_DIR,
    title: str = "dpbench report",
) -> Path:
    """Resolve ``runs`` (see :func:`resolve_runs`), render them and write ``output`` atomically."""
    files = resolve_runs(list(runs), results_dir=results_dir)
    html = render_report([read_run(p) for p in files], title=title)
    return atomic_write_text(output, html)
