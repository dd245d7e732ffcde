"""Render saved runs into one self-contained HTML file (Jinja2, autoescaped; one inline script,
allowed by its hash in the page's Content-Security-Policy, that sorts and filters tables)."""

from __future__ import annotations

import base64
import datetime as _dt
import hashlib
import json
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jinja2
import markupsafe

from dpbench._atomic import atomic_write_text
from dpbench.decision.model import Decision
from dpbench.errors import UsageError
from dpbench.gate.compare import DEFAULT_THRESHOLD
from dpbench.predict.forecast import StepForecast
from dpbench.report.data import report_data
from dpbench.report.machines import environment_lines
from dpbench.report.sections import build_sections
from dpbench.results.frame import runs_frame
from dpbench.results.load import DEFAULT_RESULTS_DIR, ResultsError, SavedRun, read_run, resolve_runs
from dpbench.schema import __version__

__all__ = ["render_report", "render_report_and_decision", "write_report", "write_report_and_decision"]

_TEMPLATES = Path(__file__).parent / "templates"


def _environment() -> jinja2.Environment:
    # autoescape=True for every template: each string from a results file (benchmark names,
    # params, machine_info) is data and must never become markup in the report.
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(_TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def _text(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


def _runtime_env(run: SavedRun) -> str | None:
    """The OpenMP/MKL/malloc variables the run's workers inherited (``harness_settings.user_runtime_env``):
    each distinct setting once; "none set" when every benchmark recorded an empty one; None (–) if none recorded."""
    envs = []
    for bench in run.benchmarks:
        extra = bench.get("extra_info") if isinstance(bench, dict) else None
        settings = extra.get("harness_settings") if isinstance(extra, dict) else None
        env = settings.get("user_runtime_env") if isinstance(settings, dict) else None
        if isinstance(env, dict):
            envs.append(env)
    if not envs:
        return None
    distinct = sorted({json.dumps(env, sort_keys=True) for env in envs})
    return " | ".join(d if d != "{}" else "none set" for d in distinct)


def _provenance(run: SavedRun, short_name: str) -> dict[str, Any]:
    m, c = run.machine_info, run.commit_info
    gpus = m.get("gpus") if isinstance(m.get("gpus"), list) else []
    gpu_text = ", ".join(_text(g.get("name")) for g in gpus if isinstance(g, dict)) or "none"
    dp = m.get("dpbench") if isinstance(m.get("dpbench"), dict) else {}
    cpu = m.get("cpu") if isinstance(m.get("cpu"), dict) else {}
    commit = f"{_text(c.get('id'))} on {_text(c.get('branch'))}" + (" (dirty)" if c.get("dirty") else "")
    fields = [
        ("file", str(run.path)),
        ("saved", run.datetime),
        ("pytest-benchmark", run.version),
        ("commit", commit),
        ("host", m.get("node")),
        ("cpu", cpu.get("brand_raw")),
        ("cpu count", m.get("cpu_count", cpu.get("count"))),
        ("gpus", gpu_text),
        ("driver", m.get("driver")),
        ("cuda", m.get("cuda")),
        ("nccl", m.get("nccl")),
        ("torch", m.get("torch")),
        ("torch build", m.get("torch_build")),
        ("torch git", m.get("torch_git")),
        ("cudnn", m.get("cudnn")),
        ("python", m.get("python_version")),
        ("packages", len(m["packages"]) if isinstance(m.get("packages"), dict) else None),
        ("dpbench", dp.get("version")),
        ("lock hash", dp.get("lock_hash")),
        ("profile", dp.get("profile")),
        ("threads per worker", m.get("threads_per_worker")),
        ("worker start", dp.get("worker_start")),
        ("worker runtime env", _runtime_env(run)),
    ]
    return {
        "name": short_name,
        "fields": [(k, _text(v)) for k, v in fields],
        "machine_json": json.dumps(m, indent=1, sort_keys=True, default=str),
    }


def _script() -> tuple[str, str]:
    """The page's one inline script (sorting and filtering tables) and its CSP hash: the policy
    allows exactly this script and nothing else, no 'unsafe-inline'."""
    text = (_TEMPLATES / "tables.js").read_text(encoding="utf-8")
    digest = base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")
    return text, f"'sha256-{digest}'"


def render_report(runs: Sequence[SavedRun], *, title: str = "dpbench report") -> str:
    """The HTML text of a report over ``runs`` (as returned by :func:`read_run`)."""
    return render_report_and_decision(runs, title=title)[0]


def render_report_and_decision(
    runs: Sequence[SavedRun], *, title: str = "dpbench report", forecasts: Sequence[StepForecast | None] = ()
) -> tuple[str, Decision]:
    """The HTML text of a report over ``runs`` and the decision model it renders (computed once:
    the terminal and ``--json`` render the same object); ``forecasts``: per run, in the order of
    ``runs``, its forecast at other world sizes (None: nothing to predict from) for the section
    "Predicted at other world sizes" (empty: no such section)."""
    if not runs:
        raise ResultsError("no runs to report on")
    if forecasts and len(forecasts) != len(runs):
        raise ValueError(f"forecasts: expected one per run ({len(runs)}), found {len(forecasts)}")
    data = report_data(runs_frame(runs))
    run_names = data.runs
    data.forecasts = list(forecasts)
    script, script_hash = _script()
    template = _environment().get_template("report.html.j2")
    html = template.render(
        title=title,
        generated=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        version=__version__,
        run_names=run_names,
        n_benchmarks=len(data.frame),
        n_configurations=len(data.configs),
        warnings=data.warnings,
        trial_notes=data.trial_notes,
        environments=environment_lines(runs, run_names),
        sections=build_sections(data),
        threshold=DEFAULT_THRESHOLD,
        provenance=[_provenance(r, n) for r, n in zip(runs, run_names)],
        script=markupsafe.Markup(script),
        script_hash=markupsafe.Markup(script_hash),  # base64 and quotes, built here: nothing from a file
    )
    return html, data.decided()


def write_report(
    runs: Sequence[str | os.PathLike] = (),
    output: str | os.PathLike = "report.html",
    *,
    results_dir: str | os.PathLike = DEFAULT_RESULTS_DIR,
    title: str = "dpbench report",
) -> Path:
    """Resolve ``runs`` (see :func:`resolve_runs`), render them and write ``output`` atomically."""
    return write_report_and_decision(runs, output, results_dir=results_dir, title=title)[0]


def write_report_and_decision(
    runs: Sequence[str | os.PathLike] = (),
    output: str | os.PathLike = "report.html",
    *,
    results_dir: str | os.PathLike = DEFAULT_RESULTS_DIR,
    title: str = "dpbench report",
    predict: Callable[[Sequence[SavedRun]], Sequence[StepForecast | None]] | None = None,
) -> tuple[Path, Decision]:
    """:func:`write_report`, and the decision model the page renders; ``predict``: the runs read →
    their forecasts (see :func:`render_report_and_decision`), asked before anything is written, so
    that its error leaves no file."""
    if Path(output).is_dir():
        raise UsageError(f"-o/--output: expected the path of the HTML file to write, found a directory: {output}")
    files = resolve_runs(list(runs), results_dir=results_dir)
    read = [read_run(p) for p in files]
    forecasts = predict(read) if predict is not None else ()
    html, decision = render_report_and_decision(read, title=title, forecasts=forecasts)
    return atomic_write_text(output, html), decision
