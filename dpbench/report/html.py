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

from dpbench._atomic import atomic_write_text
from dpbench.schema import __version__
from dpbench.gate.compare import DEFAULT_THRESHOLD, compare_frames
from dpbench.gate.compare_format import HEADER, display_names, rows, summary_line, verdict_line
from dpbench.report.figures import Table
from dpbench.results.frame import runs_frame
from dpbench.results.load import DEFAULT_RESULTS_DIR, ResultsError, Run, read_run, resolve_runs
from dpbench.report.sections import build_sections
from dpbench.report.summary import run_warnings, summarize
from dpbench.report.traces import OPEN_OFFLINE, build_traces  # issue 20: the "Traces" section

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


def _comparisons(frame: pd.DataFrame, runs: Sequence[str]) -> list[dict[str, Any]]:
    """Each later run against the first, through the gate's own code and verdicts."""
    out = []
    base = frame[frame["run"] == runs[0]]
    for other in runs[1:]:
        entry: dict[str, Any] = {"baseline": runs[0], "candidate": other, "note": None, "warnings": [],
                                 "counts": "", "verdict": "", "notes": [], "table": Table([], [])}
        try:
            # The gate's defaults, so the page says what `dpbench compare` would say.
            cmp = compare_frames(base, frame[frame["run"] == other], baseline_name=runs[0], candidate_name=other)
        except ResultsError as e:
            entry["note"] = str(e)
            out.append(entry)
            continue
        short = display_names([b.name for b in cmp.benchmarks])
        entry.update(warnings=cmp.warnings, counts=summary_line(cmp), verdict=verdict_line(cmp),
                     notes=[f"{short[b.name]}: {b.note}" for b in cmp.benchmarks if b.note],
                     table=Table(list(HEADER), rows(cmp)))
        out.append(entry)
    return out


def render_report(runs: Sequence[Run], *, title: str = "dpbench report") -> str:
    """The HTML text of a report over ``runs`` (as returned by :func:`read_run`)."""
    if not runs:
        raise ResultsError("no runs to report on")
    frame = runs_frame(runs)
    run_names = list(dict.fromkeys(frame["run"]))
    template = _environment().get_template("report.html.j2")
    return template.render(
        title=title,
        generated=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        version=__version__,
        run_names=run_names,
        n_benchmarks=len(frame),
        warnings=run_warnings(frame),
        summary=summarize(frame),
        sections=build_sections(frame),
        comparisons=_comparisons(frame, run_names) if len(run_names) > 1 else [],
        threshold=DEFAULT_THRESHOLD,
        provenance=[_provenance(r, n) for r, n in zip(runs, run_names)],
        traces=build_traces(frame), traces_open_offline=OPEN_OFFLINE,  # issue 20 (templates/_traces.html.j2)
    )


def write_report(
    runs: Sequence[str | os.PathLike] = (),
    output: str | os.PathLike = "report.html",
    *,
    results_dir: str | os.PathLike = DEFAULT_RESULTS_DIR,
    title: str = "dpbench report",
) -> Path:
    """Resolve ``runs`` (see :func:`resolve_runs`), render them and write ``output`` atomically."""
    if Path(output).is_dir():
        raise ResultsError(f"-o/--output: expected the path of the HTML file to write, found a directory: {output}")
    files = resolve_runs(list(runs), results_dir=results_dir)
    html = render_report([read_run(p) for p in files], title=title)
    return atomic_write_text(output, html)
