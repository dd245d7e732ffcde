"""results: saved runs as data — find them (``results/<machine>/NNNN_NAME.json`` or a path), read
and validate them (JSON only, never evaluated), and turn them into one tidy DataFrame with one
row per benchmark, plus the unit formatting every command prints with. Disturbed trials
(:mod:`~dpbench.results.disturbed`) are marked there and left out of the readings every command shares.

May import: ``dpbench.schema``, ``dpbench.stats`` and ``dpbench.decision`` (the configurations
frame, other processes' CPU share). Never torch, the gate or the report: both
of those read runs through here.
"""
from __future__ import annotations

from dpbench._lazy import lazy_attributes

__all__ = ["ResultsError", "SavedRun", "load_runs", "read_run", "resolve_runs", "runs_frame"]

_LAZY = {
    "ResultsError": "dpbench.results.load",
    "SavedRun": "dpbench.results.load",
    "read_run": "dpbench.results.load",
    "resolve_runs": "dpbench.results.load",
    "load_runs": "dpbench.results.frame",
    "runs_frame": "dpbench.results.frame",
}

__getattr__, __dir__ = lazy_attributes('dpbench.results', _LAZY, __all__, globals())
