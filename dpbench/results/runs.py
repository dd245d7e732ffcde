"""The saved runs, machine by machine, with what a person picks a run by.

One line per run: its id (what ``compare``/``report`` accept), date, commit, profile, how many
benchmarks and trials, and the torch it ran with. A file that cannot be read is listed with why,
never fatal: the listing is how a person finds out which runs are usable.
"""

from __future__ import annotations

import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dpbench.results.console import paint, colour_wanted, write_json
from dpbench.results.load import ResultsError, read_run, saved_runs

__all__ = ["RunSummary", "format_runs", "summarise_runs"]


@dataclass(frozen=True, kw_only=True)
class RunSummary:
    """One saved run as ``dpbench runs`` lists it."""

    machine: str
    """the machine id (the directory pytest-benchmark saved it under)"""
    run: str
    """the file's stem, ``NNNN_NAME``: what ``compare`` and ``report`` accept (its ``NNNN`` too)"""
    path: str
    date: str = ""
    """when the run was saved (pytest-benchmark's ``datetime``, to the minute)"""
    commit: str = ""
    """the commit measured, 10 characters, ``+dirty`` when the tree had changes"""
    profile: str = ""
    benchmarks: int = 0
    trials: str = ""
    """trials per benchmark: ``5``, or ``3-5`` when they differ, '' without dpbench trials"""
    torch: str = ""
    error: str = ""
    """why the file could not be read ('' when it could)"""


def _trials(benchmarks: list[dict[str, Any]]) -> str:
    counts = []
    for b in benchmarks:
        trials = (b.get("extra_info") or {}).get("trials")
        if isinstance(trials, dict) and isinstance(trials.get("count"), int):
            counts.append(trials["count"])
    if not counts:
        return ""
    lo, hi = min(counts), max(counts)
    return str(lo) if lo == hi else f"{lo}-{hi}"


def _summary(results_dir: Path, run_id: str) -> RunSummary:
    machine, stem = run_id.split("/", 1)
    path = results_dir / machine / f"{stem}.json"
    try:
        run = read_run(path)
    except ResultsError as e:
        return RunSummary(machine=machine, run=stem, path=str(path), error=str(e).replace(f"{path}: ", "", 1))
    commit = str(run.commit_info.get("id") or "")
    commit = commit[:10] if re.fullmatch(r"[0-9a-f]{11,}", commit) else commit  # a sha, shortened; words kept
    if commit and run.commit_info.get("dirty"):
        commit += "+dirty"
    profiles = sorted({str(p) for b in run.benchmarks if (p := (b.get("extra_info") or {}).get("profile"))})
    return RunSummary(
        machine=machine,
        run=stem,
        path=str(path),
        date=run.datetime[:16].replace("T", " "),
        commit=commit,
        profile="/".join(profiles),
        benchmarks=len(run.benchmarks),
        trials=_trials(run.benchmarks),
        torch=str(run.machine_info.get("torch") or ""),
    )


def summarise_runs(results_dir: str | Path) -> list[RunSummary]:
    """Every saved run under ``results_dir`` (``<machine>/NNNN_NAME.json``), machine by machine, oldest first."""
    results_dir = Path(results_dir)
    if results_dir.exists() and not results_dir.is_dir():
        raise ResultsError(f"--results: expected a directory of saved runs, found the file {results_dir}")
    return [_summary(results_dir, run_id) for run_id in saved_runs(results_dir)]


_HEADER = ("run", "date", "commit", "profile", "benchmarks", "trials", "torch")


def format_runs(runs: list[RunSummary], *, colour: bool = False) -> str:
    """The listing: one block per machine, one aligned line per run."""
    lines: list[str] = []
    by_machine: dict[str, list[RunSummary]] = {}
    for r in runs:
        by_machine.setdefault(r.machine, []).append(r)
    for machine, group in by_machine.items():
        rows = [
            (r.run, r.date, r.commit, r.profile, str(r.benchmarks), r.trials, r.torch) if not r.error else None
            for r in group
        ]
        table = [_HEADER] + [row for row in rows if row]
        widths = [max(len(row[i]) for row in table) for i in range(len(_HEADER))]
        lines.append(paint(f"{machine}: {len(group)} run{'s' if len(group) != 1 else ''}", "bold", colour))
        lines.append("  " + "  ".join(h.ljust(w) for h, w in zip(_HEADER, widths)).rstrip())
        for r, row in zip(group, rows):
            if row is None:
                lines.append("  " + paint(f"{r.run}  unreadable: {r.error}", "bad", colour))
            else:
                lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    return "\n".join(lines) + ("\n" if lines else "")
