"""Find saved runs and read them (validated, never evaluated); :mod:`dpbench.results.frame`
turns them into the tidy DataFrame.

A run is one pytest-benchmark JSON file (``results/<machine-id>/NNNN_NAME.json``). Any
pytest-benchmark file loads; dpbench's ``extra_info`` (schemas ``dpbench.schema.READABLE_SCHEMAS``)
enriches its rows. Results files are data: parsed with ``json`` only, never pickled or evaluated.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from dpbench.schema import READABLE_SCHEMAS

__all__ = [
    "MACHINE_FIELDS",
    "DPBENCH_MARKERS",
    "ResultsError",
    "SavedRun",
    "DEFAULT_RESULTS_DIR",
    "is_dpbench",
    "read_run",
    "resolve_run",
    "resolve_runs",
    "saved_runs",
]

# Fields of the machine that change benchmark numbers on their own (the frame's machine.* columns):
# the gate warns when they differ between sides, the history marks where they moved.
MACHINE_FIELDS = ("gpu", "gpu_count", "driver", "cuda", "torch", "cpu")

DEFAULT_RESULTS_DIR = Path("results")

# Keys that mark extra_info as written by dpbench (as opposed to some other benchmark).
DPBENCH_MARKERS = ("schema", "kind", "strategy", "workload", "steps_per_round", "collective")
_RUN_FILE = re.compile(r"^(\d{4})_.*\.json$")
_NAME_FIELDS = (
    "kind",
    "suite",
    "strategy",
    "workload",
    "device_type",
    "backend",
    "profile",
    "collective",
    "dtype",
    "case_key",
)
_LISTED_RUNS = 20  # an unknown run id lists the saved runs, up to this many


class ResultsError(ValueError):
    """Unusable results input. The message is one line, fit to print as the CLI's error."""


@dataclass
class SavedRun:
    """One saved pytest-benchmark run, as read from disk."""

    path: Path
    machine_info: dict[str, Any]
    commit_info: dict[str, Any]
    datetime: str
    version: str
    benchmarks: list[dict[str, Any]] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        """``<machine-id>/<file stem>``, pytest-benchmark's own way of naming a saved run."""
        return f"{self.path.parent.name}/{self.path.stem}"


# ---------------------------------------------------------------- finding runs
def _run_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*.json") if p.is_file())


def _newest(files: Iterable[Path]) -> Path:
    # pytest-benchmark numbers runs per machine (0001, 0002, …); the number orders them
    # even when file times were lost (a CI artifact, a git checkout); mtime breaks ties.
    def key(p: Path) -> tuple[int, float, str]:
        m = _RUN_FILE.match(p.name)
        return (int(m.group(1)) if m else -1, p.stat().st_mtime, p.name)

    return max(files, key=key)


def _newest_per_machine(directory: Path) -> list[Path]:
    files = _run_files(directory)
    if not files:
        raise ResultsError(f"{directory}: no saved runs (*.json) found in this directory")
    by_machine: dict[Path, list[Path]] = {}
    for f in files:
        by_machine.setdefault(f.parent, []).append(f)
    return [_newest(group) for _, group in sorted(by_machine.items())]


def _by_id(run_id: str, results_dir: Path) -> list[Path]:
    """Files matching a pytest-benchmark id: ``0001`` or ``0001_name`` (with or without .json)."""
    stem = run_id[:-5] if run_id.endswith(".json") else run_id
    if not re.fullmatch(r"\d{4}(_[^/\\]*)?", stem) or not results_dir.is_dir():
        return []
    pattern = f"{stem}_*.json" if len(stem) == 4 else f"{stem}.json"
    return sorted(p for p in results_dir.glob(f"*/{pattern}") if p.is_file())


def saved_runs(results_dir: str | os.PathLike) -> list[str]:
    """``<machine-id>/<stem>`` of every saved run under ``results_dir``, in order."""
    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        return []
    files = sorted(results_dir.glob("*/*.json"), key=lambda p: (p.parent.name, p.name))
    return [f"{p.parent.name}/{p.stem}" for p in files if _RUN_FILE.match(p.name)]


def _unknown_run(spec: str, results_dir: Path) -> ResultsError:
    known = saved_runs(results_dir)
    if results_dir.is_file():
        found = f"and --results {results_dir} is a file, not a directory of saved runs"
    elif not results_dir.is_dir():
        found = f"and {results_dir}/ does not exist"
    elif not known:
        found = f"and {results_dir}/ holds no saved runs"
    else:
        more = f" and {len(known) - _LISTED_RUNS} more" if len(known) > _LISTED_RUNS else ""
        found = f"saved runs under {results_dir}/: {', '.join(known[:_LISTED_RUNS])}{more}"
    return ResultsError(
        f"run {spec!r}: expected a results file, a directory or a saved-run id (like 0001 or 0001_name), "
        f"found none of these; {found}"
    )


def _resolve_spec(spec: str | os.PathLike, results_dir: Path) -> list[Path]:
    path = Path(spec)
    if path.is_file():
        return [path]
    if path.is_dir():
        return _newest_per_machine(path)
    matches = _by_id(str(spec), results_dir)
    if matches:
        return matches
    raise _unknown_run(str(spec), results_dir)


def resolve_runs(
    specs: Sequence[str | os.PathLike] = (), *, results_dir: str | os.PathLike = DEFAULT_RESULTS_DIR
) -> list[Path]:
    """Result files named by ``specs`` (files, directories, or ids like ``0001``).

    A directory stands for the newest run of each machine below it; no specs means the
    newest run of each machine in ``results_dir``.
    """
    results_dir = Path(results_dir)
    if not specs:
        if results_dir.is_file():
            raise ResultsError(
                f"--results: expected a directory of saved runs, found the file {results_dir} "
                f"(a run file goes as RUN: `dpbench report {results_dir}`)"
            )
        if not results_dir.is_dir():
            raise ResultsError(
                f"no runs given and the results directory {results_dir}/ does not exist: "
                "run `pytest suites/ --benchmark-save=NAME` first or pass a results file"
            )
        return _newest_per_machine(results_dir)
    out: list[Path] = []
    for spec in specs:
        for p in _resolve_spec(spec, results_dir):
            if p not in out:
                out.append(p)
    return out


def resolve_run(spec: str | os.PathLike, *, results_dir: str | os.PathLike = DEFAULT_RESULTS_DIR) -> Path:
    """Exactly one result file for ``spec``; a directory stands for its newest run."""
    results_dir = Path(results_dir)
    path = Path(spec)
    if path.is_dir():
        files = _run_files(path)
        if not files:
            raise ResultsError(f"{path}: no saved runs (*.json) found in this directory")
        return _newest(files)
    matches = _resolve_spec(spec, results_dir)
    if len(matches) > 1:
        names = ", ".join(str(m) for m in matches)
        raise ResultsError(f"run {str(spec)!r} is ambiguous: it matches {names}; pass one file")
    return matches[0]


# ---------------------------------------------------------------- reading one run
def is_dpbench(extra: dict[str, Any]) -> bool:
    """Whether ``extra_info`` was written by dpbench (as opposed to some other benchmark)."""
    return any(k in extra for k in DPBENCH_MARKERS)


def _check_schema(path: Path, index: int, extra: dict[str, Any]) -> None:
    if not is_dpbench(extra):
        return  # a plain pytest-benchmark benchmark: nothing of ours to check
    where = f"{path}: benchmark #{index}"
    schema = extra.get("schema")
    if schema is None:
        schema = 0  # pre-release dpbench wrote its fields without a version
    if isinstance(schema, bool) or not isinstance(schema, int):
        raise ResultsError(f"{where}: extra_info.schema: expected an integer, found {schema!r}")
    if schema > max(READABLE_SCHEMAS):
        raise ResultsError(
            f"{where}: extra_info schema {schema} is newer than this dpbench reads "
            f"(schemas {', '.join(map(str, READABLE_SCHEMAS))}); upgrade dpbench to read it"
        )
    if schema not in READABLE_SCHEMAS:
        raise ResultsError(
            f"{where}: extra_info schema {schema} is older than this dpbench reads "
            f"(schemas {', '.join(map(str, READABLE_SCHEMAS))}); re-run the suites with this version to compare"
        )
    trials = extra.get("trials")
    if trials is not None and not isinstance(trials, dict):
        raise ResultsError(f"{where}: extra_info.trials: expected an object, found {type(trials).__name__}")


def _check_benchmark(path: Path, index: int, bench: Any) -> None:
    where = f"{path}: benchmark #{index}"
    if not isinstance(bench, dict):
        raise ResultsError(f"{where}: expected an object, found {type(bench).__name__}")
    for key in ("name", "fullname"):
        if not isinstance(bench.get(key), str):
            raise ResultsError(f"{where}: {key!r}: expected a string, found {bench.get(key)!r}")
    stats = bench.get("stats")
    if not isinstance(stats, dict):
        raise ResultsError(f"{where}: 'stats': expected an object, found {type(stats).__name__}")
    for key in ("median", "rounds"):
        value = stats.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ResultsError(f"{where}: stats.{key}: expected a number, found {value!r}")
    data = stats.get("data")
    if data is not None and not (
        isinstance(data, list) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in data)
    ):
        raise ResultsError(f"{where}: stats.data: expected a list of numbers")
    extra = bench.get("extra_info", {})
    if not isinstance(extra, dict):
        raise ResultsError(f"{where}: 'extra_info': expected an object, found {type(extra).__name__}")
    _check_schema(path, index, extra)
    for key in _NAME_FIELDS:  # identifiers the report groups and labels by
        value = extra.get(key)
        if value is not None and not isinstance(value, str):
            raise ResultsError(f"{where}: extra_info.{key}: expected a string, found {type(value).__name__}")


def read_run(path: str | os.PathLike) -> SavedRun:
    """Read and validate one pytest-benchmark results file."""
    path = Path(path)
    try:
        with path.open("r", encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as e:
        raise ResultsError(f"{path}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise ResultsError(f"{path}: not a pytest-benchmark results file (not UTF-8 text)") from None
    except json.JSONDecodeError as e:
        raise ResultsError(f"{path}: corrupt JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    expected = ("machine_info", "benchmarks", "datetime")
    if not isinstance(doc, dict) or not all(k in doc for k in expected):
        found = sorted(doc)[:8] if isinstance(doc, dict) else type(doc).__name__
        raise ResultsError(
            f"{path}: not a pytest-benchmark results file (expected keys {', '.join(expected)}; found {found})"
        )
    benchmarks = doc["benchmarks"]
    if not isinstance(benchmarks, list):
        raise ResultsError(f"{path}: 'benchmarks': expected a list, found {type(benchmarks).__name__}")
    if not benchmarks:
        raise ResultsError(f"{path}: the run contains no benchmarks")
    for i, bench in enumerate(benchmarks):
        _check_benchmark(path, i, bench)
    machine = doc["machine_info"] if isinstance(doc["machine_info"], dict) else {}
    commit = doc.get("commit_info") if isinstance(doc.get("commit_info"), dict) else {}
    return SavedRun(
        path=path,
        machine_info=machine,
        commit_info=commit,
        datetime=str(doc["datetime"]),
        version=str(doc.get("version", "")),
        benchmarks=benchmarks,
    )
