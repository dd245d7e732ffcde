"""report: renders saved runs into one self-contained HTML page: the decision view first
(:mod:`dpbench.report.decision`), then one figure per kind (matplotlib, SVG), sortable tables,
provenance, and the gate's verdicts between runs. It renders; it never judges or re-derives.
The sections are a plain list (:data:`dpbench.report.sections.SECTIONS`): a new one is a function
and a line there.

May import: ``dpbench.results`` (the tidy frame), ``dpbench.gate`` (verdicts to show),
``dpbench.predict`` (a run's forecast at other world sizes, to show), ``dpbench.ab`` (the
provenance lines of two environments),
``dpbench.stats``, ``dpbench.schema``. Never torch. Names load lazily so ``dpbench --help`` stays
fast (pandas and matplotlib are only imported when a report is made); ``load_runs`` and friends
are re-exported from ``dpbench.results`` for convenience.
"""

from __future__ import annotations

from dpbench._lazy import lazy_attributes

__all__ = [
    "ResultsError",
    "SavedRun",
    "load_runs",
    "read_run",
    "render_report",
    "resolve_runs",
    "runs_frame",
    "write_report",
]

_LAZY = {
    "ResultsError": "dpbench.results.load",
    "SavedRun": "dpbench.results.load",
    "read_run": "dpbench.results.load",
    "resolve_runs": "dpbench.results.load",
    "load_runs": "dpbench.results.frame",
    "runs_frame": "dpbench.results.frame",
    "render_report": "dpbench.report.html",
    "write_report": "dpbench.report.html",
}


__getattr__, __dir__ = lazy_attributes("dpbench.report", _LAZY, __all__, globals())
