"""dpbench.report: load saved runs, render the HTML report, and gate regressions.

Never imports torch. Names are loaded lazily so ``dpbench --help`` stays fast (pandas and
matplotlib are only imported when a report or comparison is actually made).
"""
from __future__ import annotations

from dpbench._lazy import lazy_attributes

__all__ = [
    "Comparison",
    "ResultsError",
    "Run",
    "Verdict",
    "compare_frames",
    "compare_runs",
    "load_runs",
    "read_run",
    "render_report",
    "resolve_runs",
    "runs_frame",
    "write_report",
]

_LAZY = {
    "Comparison": "dpbench.gate.compare",
    "Verdict": "dpbench.gate.compare",
    "compare_frames": "dpbench.gate.compare",
    "compare_runs": "dpbench.gate.compare",
    "ResultsError": "dpbench.results.load",
    "Run": "dpbench.results.load",
    "read_run": "dpbench.results.load",
    "resolve_runs": "dpbench.results.load",
    "load_runs": "dpbench.results.frame",
    "runs_frame": "dpbench.results.frame",
    "render_report": "dpbench.report.html",
    "write_report": "dpbench.report.html",
}


__getattr__, __dir__ = lazy_attributes('dpbench.report', _LAZY, __all__, globals())
