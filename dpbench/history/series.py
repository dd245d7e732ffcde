"""Every benchmark's step time over commits, and the commits where it changed.

Saved runs (schema 1 and 2, every run file under the given directories) become one *series*
per machine and benchmark: one point per commit (the trials of all runs of that commit pooled),
in git order (``git rev-list --topo-order HEAD``) when every commit is known to the repository
history is run in, otherwise by date. Change points come from
:mod:`dpbench.history.changepoints`; accepted changes (:mod:`dpbench.history.accepted`) are
shown but never flagged. A run file that cannot be read is named and skipped, never fatal;
nothing is written under ``results/``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpbench.errors import UsageError
from dpbench.history.accepted import Accepted
from dpbench.history.changepoints import DEFAULT_ALPHA, DEFAULT_THRESHOLD, Change, SeriesChanges, find_changes
from dpbench.history.git import commit_order, descendants
from dpbench.results.load import DEFAULT_RESULTS_DIR, MACHINE_FIELDS, ResultsError, SavedRun, read_run, resolve_runs
from dpbench.stats import log_t_interval, median, positive

__all__ = [
    "History",
    "Level",
    "Order",
    "Point",
    "Series",
    "SeriesChange",
    "accepted_baseline",
    "accepted_levels",
    "build_history",
    "load_history",
    "run_files",
]


class Order:
    """How the points are ordered (saved in ``--json``)."""

    GIT = "git"
    DATE = "date"


@dataclass(kw_only=True)
class Point:
    commit: str  # commit id, or the run id of a run without commit info
    date: str  # the earliest run of this commit
    trials: list[float]
    controls: list[float]
    runs: list[str]
    machine: dict[str, Any]  # machine fields (MACHINE_FIELDS) of the newest run of the point
    saved_interval: tuple[float, float] | None = None  # the run's own step_time_ci95 (one run only)

    @property
    def median_s(self) -> float:
        return median(self.trials)

    @property
    def interval(self) -> tuple[float, float]:
        """95% interval of the point's centre: the one its run saved, or from the pooled trials."""
        if len(self.runs) == 1 and self.saved_interval and not math.isnan(self.saved_interval[0]):
            return self.saved_interval
        return log_t_interval(self.trials)


@dataclass(kw_only=True)
class SeriesChange:
    """A reported change with its commits named and its accepted entry, if any."""

    change: Change
    commit: str  # the first commit after the (largest) step
    commit_range: tuple[str, str]  # (last measured before, first measured after)
    control_ratio: float  # median control after / before: the machine moved, not the code, if far from 1
    accepted: Accepted | None = None

    @property
    def direction(self) -> str:
        return self.change.direction


@dataclass(kw_only=True)
class Series:
    machine: str
    key: str
    name: str  # the pytest name (the newest run's)
    fullname: str
    suite: str
    workload: str
    label: str
    unit: str
    points: list[Point]
    found: SeriesChanges
    changes: list[SeriesChange] = field(default_factory=list)
    events: list[tuple[int, str]] = field(default_factory=list)  # (point index, what changed on the machine)


@dataclass(kw_only=True)
class History:
    series: list[Series]
    order: str
    order_note: str  # said once: how the commits are ordered and why
    commits: list[str]  # every measured commit, oldest first
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, why) of unreadable run files
    threshold: float = DEFAULT_THRESHOLD
    alpha: float = DEFAULT_ALPHA

    def changes(self) -> list[tuple[Series, SeriesChange]]:
        """Every reported change, newest first."""
        position = {c: i for i, c in enumerate(self.commits)}
        found = [(s, c) for s in self.series for c in s.changes]
        return sorted(found, key=lambda sc: (-position.get(sc[1].commit_range[1], -1), sc[0].name))

    def new_regressions(self, newest: int) -> list[tuple[Series, SeriesChange]]:
        """Regressions not accepted whose first commit after is among the newest ``newest`` commits."""
        recent = set(self.commits[-newest:]) if newest > 0 else set()
        return [
            (s, c)
            for s, c in self.changes()
            if c.direction == "regression" and c.accepted is None and c.commit_range[1] in recent
        ]


# ---------------------------------------------------------------- reading
def run_files(specs: Sequence[str | os.PathLike], results_dir: str | os.PathLike = DEFAULT_RESULTS_DIR) -> list[Path]:
    """Every run file named: a directory stands for *all* ``*.json`` below it (not just the
    newest); files and saved-run ids as for the other commands; no specs means ``results_dir``."""
    specs = list(specs) or [results_dir]
    out: list[Path] = []
    for spec in specs:
        path = Path(spec)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*.json") if p.is_file())
            if not found:
                raise ResultsError(f"{path}: no saved runs (*.json) found in this directory")
        elif not path.exists() and str(spec) == str(results_dir):
            raise ResultsError(
                f"no runs given and the results directory {path}/ does not exist: run `pytest suites/ "
                "--benchmark-save=NAME` first or pass run files"
            )
        else:
            found = resolve_runs([spec], results_dir=results_dir)
        out += [p for p in found if p not in out]
    return out


def load_history(files: Sequence[Path], **kwargs: Any) -> History:
    """Read ``files`` (an unreadable one is skipped and listed) and build the history."""
    runs, skipped = [], []
    for path in files:
        try:
            runs.append(read_run(path))
        except ResultsError as e:
            skipped.append((str(path), str(e)))
    if not runs:
        raise ResultsError(
            f"none of the {len(files)} run files could be read (first: {skipped[0][1]})"
            if skipped
            else "no runs to build a history from"
        )
    history = build_history(runs, **kwargs)
    history.skipped = skipped
    return history


# ---------------------------------------------------------------- ordering
def _commit_of(run: SavedRun) -> str | None:
    commit = run.commit_info.get("id")
    return commit.lower() if isinstance(commit, str) and commit else None


def _order(runs: Sequence[SavedRun], cwd: Path | None) -> tuple[str, str, dict[str, int] | None]:
    """(order, the sentence that says so, commit -> git position or None)."""
    missing = sum(_commit_of(r) is None for r in runs)
    if missing:
        return (
            Order.DATE,
            (f"ordered by date: {missing} of {len(runs)} runs have no commit info (commit_info.id)"),
            None,
        )
    git = commit_order(cwd)
    if git is None:
        return Order.DATE, "ordered by date: not run inside a git repository", None
    position = {c: i for i, c in enumerate(git)}
    unknown = {_commit_of(r) for r in runs} - position.keys()
    if unknown:
        return (
            Order.DATE,
            (
                f"ordered by date: {len(unknown)} commits of the runs are not in this repository's "
                f"history of HEAD (e.g. {sorted(unknown)[0][:12]})"
            ),
            None,
        )
    return Order.GIT, "ordered by git (rev-list --topo-order HEAD)", position


# ---------------------------------------------------------------- series
def _machine_of(row: Any) -> str:
    node = row.get("machine.node")
    return str(node) if isinstance(node, str) and node else str(row["machine_id"])


def _series_key(row: Any) -> str:
    key = row.get("case_key")
    if isinstance(key, str) and key:
        return f"{row.get('suite') or ''}|{key}"
    return str(row["fullname"])


def _text(value: Any) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


def _events(points: Sequence[Point]) -> list[tuple[int, str]]:
    out = []
    for i in range(1, len(points)):
        before, after = points[i - 1].machine, points[i].machine
        moved = [
            f"{k} {_text(before.get(k)) or '?'} → {_text(after.get(k)) or '?'}"
            for k in MACHINE_FIELDS
            if _text(before.get(k)) != _text(after.get(k))
        ]
        if moved:
            out.append((i, "; ".join(moved)))
    return out


def _control_ratio(points: Sequence[Point], change: Change) -> float:
    before = [v for p in points[change.before.start : change.before.stop] for v in p.controls]
    after = [v for p in points[change.after.start : change.after.stop] for v in p.controls]
    return median(after) / median(before) if before and after else math.nan


def _is_accepted(entry: Accepted, series: Series, change: Change, order: list[str] | None) -> bool:
    if not entry.matches(series.name, series.fullname, series.machine):
        return False
    lo, hi = series.points[change.last_before].commit, series.points[change.first_after].commit
    if order is not None:  # git order: any commit in (last before, first after], measured or not
        inside = order[order.index(lo) + 1 : order.index(hi) + 1]
        return any(entry.is_commit(c) for c in inside)
    return any(entry.is_commit(p.commit) for p in series.points[change.last_before + 1 : change.first_after + 1])


def _judge(series: Series, accepted: Sequence[Accepted], order: list[str] | None) -> None:
    for change in series.found.changes:
        named = SeriesChange(
            change=change,
            commit=series.points[change.first].commit,
            commit_range=(series.points[change.last_before].commit, series.points[change.first_after].commit),
            control_ratio=_control_ratio(series.points, change),
        )
        named.accepted = next((a for a in accepted if _is_accepted(a, series, change, order)), None)
        series.changes.append(named)


def _rows(runs: Sequence[SavedRun]):
    from dpbench.results.frame import runs_frame

    frame = runs_frame(runs)
    frame = frame[frame["trials_count"] > 0]
    return frame


def build_history(
    runs: Sequence[SavedRun],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = DEFAULT_ALPHA,
    accepted: Sequence[Accepted] = (),
    since: str | None = None,
    cwd: Path | None = None,
) -> History:
    """Series, change points and accepted marks over ``runs``."""
    order, note, position = _order(runs, cwd)
    allowed = None
    if since is not None:
        if order != Order.GIT:
            raise UsageError(f"--since {since}: needs the runs in git order, but they are {note}")
        allowed = descendants(since, cwd)
        if allowed is None:
            raise UsageError(f"--since: expected a revision of this repository, found {since!r}")
    frame = _rows(runs)
    dates = {r.run_id: r.datetime for r in runs}
    commit = {r.run_id: _commit_of(r) or r.run_id for r in runs}
    grouped: dict[tuple[str, str], dict[str, Point]] = {}
    info: dict[tuple[str, str], dict[str, Any]] = {}
    for row in frame.to_dict("records"):
        run_id = row["run_id"]
        c = commit[run_id]
        if allowed is not None and c not in allowed:
            continue
        key = (_machine_of(row), _series_key(row))
        points = grouped.setdefault(key, {})
        point = points.get(c)
        if point is None:
            point = points[c] = Point(commit=c, date=dates[run_id], trials=[], controls=[], runs=[], machine={})
        # NaN marks a disturbed trial every estimate leaves out (dpbench.results.disturbed).
        point.trials += positive(row["trial_times"])
        point.controls += positive(row["trial_controls"])
        point.runs.append(run_id)
        point.saved_interval = (row["step_time_ci95_lo"], row["step_time_ci95_hi"])
        point.date = min(point.date, dates[run_id])
        if dates[run_id] >= max(dates[r] for r in point.runs):
            point.machine = {k: row.get(f"machine.{k}") for k in MACHINE_FIELDS}
            info[key] = row
    sort_key = (lambda p: position[p.commit]) if position else (lambda p: (p.date, p.commit))
    commits_seen: dict[str, Point] = {}
    series = []
    for key, points in sorted(grouped.items()):
        ordered = sorted(points.values(), key=sort_key)
        for p in ordered:
            commits_seen.setdefault(p.commit, p)
        row = info[key]
        s = Series(
            machine=key[0],
            key=key[1],
            name=str(row["name"]),
            fullname=str(row["fullname"]),
            suite=_text(row.get("suite")) or _text(row.get("group")) or "other",
            workload=_text(row.get("workload")) or "–",
            label=_text(row.get("label")),
            unit=str(row["unit"]),
            points=ordered,
            found=find_changes([p.trials for p in ordered], threshold=threshold, alpha=alpha),
        )
        s.events = _events(ordered)
        series.append(s)
    git_order = None
    if position:
        git_order = sorted(position, key=position.__getitem__)
    for s in series:
        _judge(s, accepted, git_order)
    commits = [p.commit for p in sorted(commits_seen.values(), key=sort_key)]
    return History(series=series, order=order, order_note=note, commits=commits, threshold=threshold, alpha=alpha)


# ---------------------------------------------------------------- for the gate
def _newest_accepted(series: Series, position: dict[str, int]) -> SeriesChange | None:
    """The series' accepted change whose first measured commit after is the newest."""
    accepted = [c for c in series.changes if c.accepted is not None]
    return max(accepted, key=lambda c: position[c.commit_range[1]], default=None)


@dataclass(kw_only=True)
class Level:
    """A benchmark's level after an accepted change, as a side to judge against: its trials and
    controls commit by commit (each commit one run). The gate turns it into its own ``Pooled``."""

    unit: str
    runs: list[list[float]]
    control_runs: list[list[float]] = field(default_factory=list)
    case_key: str | None = None

    @property
    def times(self) -> list[float]:
        return [t for run in self.runs for t in run]


def accepted_baseline(history: History, benchmark: str, machine: str | None = None) -> list[float] | None:
    """The trial times of ``benchmark``'s level after its newest accepted change (up to its next
    change or the end of the series), or None without one (``dpbench compare --history`` uses
    :func:`accepted_levels`, which keeps them point by point)."""
    position = {c: i for i, c in enumerate(history.commits)}
    found = [
        c
        for s in history.series
        if s.name == benchmark and machine in (None, s.machine)
        for c in [_newest_accepted(s, position)]
        if c is not None
    ]
    newest = max(found, key=lambda c: position[c.commit_range[1]], default=None)
    return list(newest.change.after.trials) if newest else None


def accepted_levels(history: History, baseline: Any) -> tuple[dict[str, tuple[Level, str]], list[str]]:
    """The baselines ``dpbench compare --history`` judges against, and what it says once.

    ``baseline`` is the baseline side's frame (:func:`dpbench.results.frame.runs_frame`). For each
    of its benchmarks whose series (same machine, same case) has an accepted change that came
    *after* the baseline's commit, the benchmark is judged against the level after the newest such
    change — its trials commit by commit, each commit one run of the side, so the between-run
    spread is counted as for any pooled side — and not against the baseline's own trials, which
    predate the change the team accepted. Returns ``{fullname: (that side, the note its verdict
    carries)}`` and warnings. A baseline whose commit the history does not hold cannot be placed
    before or after anything: no level is used, and a warning says so."""
    position = {c: i for i, c in enumerate(history.commits)}
    commits = {str(c).lower() for c in baseline.get("commit.id", []) if isinstance(c, str) and c}
    if not commits:
        return {}, [
            "--history: the baseline has no commit info (commit_info.id), so it cannot be placed in the "
            "history: accepted levels not used"
        ]
    unknown = sorted(commits - position.keys())
    if unknown:
        return {}, [
            f"--history: the baseline's commit {unknown[0][:12]} is not among the history's "
            f"{len(history.commits)} commits: accepted levels not used"
        ]
    newest_base = max(position[c] for c in commits)
    series = {(s.machine, s.key): s for s in history.series}
    out: dict[str, tuple[Level, str]] = {}
    for row in baseline.drop_duplicates("fullname", keep="last").to_dict("records"):
        s = series.get((_machine_of(row), _series_key(row)))
        found = _newest_accepted(s, position) if s is not None else None
        if found is None or position[found.commit_range[1]] <= newest_base:
            continue
        after = s.points[found.change.after.start : found.change.after.stop]
        key = row.get("case_key")
        side = Level(
            unit=str(row["unit"]),
            runs=[list(p.trials) for p in after],
            control_runs=[list(p.controls) for p in after],
            case_key=key if isinstance(key, str) else None,
        )
        out[str(row["fullname"])] = (
            side,
            (
                f"baseline: the accepted level from {found.commit[:10]} on ({found.accepted.reason}): "
                f"{len(side.times)} trials over {len(after)} commits, not the baseline's own"
            ),
        )
    if out:
        return out, [
            f"--history: {len(out)} benchmark(s) judged against the level after an accepted change newer "
            "than the baseline's commit (their notes say which)"
        ]
    return out, []
