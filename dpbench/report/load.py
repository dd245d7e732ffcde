"""Find saved runs and load them into one tidy DataFrame.

A run is one pytest-benchmark JSON file (``results/<machine-id>/NNNN_NAME.json``). Any
pytest-benchmark file loads; dpbench's ``extra_info`` (schema ``dpbench.schema``) enriches
its rows. Results files are data: parsed with ``json`` only, never pickled or evaluated.
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import pandas as pd

from dpbench.report.units import fmt_bytes
from dpbench.schema import SCHEMA_VERSION

__all__ = [
    "ResultsError",
    "Run",
    "DEFAULT_RESULTS_DIR",
    "load_runs",
    "read_run",
    "resolve_run",
    "resolve_runs",
    "runs_frame",
]

DEFAULT_RESULTS_DIR = Path("results")

# Keys that mark extra_info as written by dpbench (as opposed to some other benchmark).
_DPBENCH_MARKERS = ("schema", "kind", "strategy", "workload", "steps_per_round", "collective")
_RUN_FILE = re.compile(r"^(\d{4})_.*\.json$")
_NAME_FIELDS = ("kind", "suite", "strategy", "workload", "device_type", "backend", "profile", "collective", "dtype")
_DERIVED = {"run", "step_time_median", "step_samples", "strategy_label", "label"}
_STAT_FIELDS = ("min", "max", "mean", "stddev", "median", "iqr", "q1", "q3", "ops", "total",
                "rounds", "iterations")


class ResultsError(ValueError):
    """Unusable results input. The message is one line, fit to print as the CLI's error."""


@dataclass
class Run:
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


def _resolve_spec(spec: str | os.PathLike, results_dir: Path) -> list[Path]:
    path = Path(spec)
    if path.is_file():
        return [path]
    if path.is_dir():
        return _newest_per_machine(path)
    matches = _by_id(str(spec), results_dir)
    if matches:
        return matches
    raise ResultsError(
        f"run {str(spec)!r}: expected a results file, a directory or a saved-run id "
        f"(like 0001 or 0001_name) under {results_dir}/, found none of these"
    )


def resolve_runs(
    specs: Sequence[str | os.PathLike] = (), *, results_dir: str | os.PathLike = DEFAULT_RESULTS_DIR
) -> list[Path]:
    """Result files named by ``specs`` (files, directories, or ids like ``0001``).

    A directory stands for the newest run of each machine below it; no specs means the
    newest run of each machine in ``results_dir``.
    """
    results_dir = Path(results_dir)
    if not specs:
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
def _check_schema(path: Path, index: int, extra: dict[str, Any]) -> None:
    if not any(k in extra for k in _DPBENCH_MARKERS):
        return  # a plain pytest-benchmark benchmark: nothing of ours to check
    where = f"{path}: benchmark #{index}"
    schema = extra.get("schema")
    if schema is None:
        schema = 0  # pre-release dpbench wrote its fields without a version
    if isinstance(schema, bool) or not isinstance(schema, int):
        raise ResultsError(f"{where}: extra_info.schema: expected an integer, found {schema!r}")
    if schema > SCHEMA_VERSION:
        raise ResultsError(
            f"{where}: extra_info schema {schema} is newer than this dpbench reads "
            f"(up to {SCHEMA_VERSION}); upgrade dpbench to read it"
        )
    if schema < SCHEMA_VERSION:
        raise ResultsError(
            f"{where}: extra_info schema {schema} is older than this dpbench reads "
            f"({SCHEMA_VERSION}); re-run the suites with this version to compare"
        )


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


def read_run(path: str | os.PathLike) -> Run:
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
            f"{path}: not a pytest-benchmark results file (expected keys {', '.join(expected)}; "
            f"found {found})"
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
    return Run(path=path, machine_info=machine, commit_info=commit, datetime=str(doc["datetime"]),
               version=str(doc.get("version", "")), benchmarks=benchmarks)


# ---------------------------------------------------------------- the tidy frame
def _as_float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


def _options_text(options: Any) -> str:
    """``{"mode": "overlap", "chunk_sizes": None}`` → ``"mode=overlap"`` (unset options say nothing)."""
    if not isinstance(options, dict):
        return ""
    items = sorted(((str(k), v) for k, v in options.items() if v is not None), key=lambda kv: kv[0])
    return ", ".join(f"{k}={v}" for k, v in items)


def machine_summary(machine: dict[str, Any]) -> dict[str, Any]:
    """The machine fields that decide whether two runs are comparable."""
    gpus = machine.get("gpus") if isinstance(machine.get("gpus"), list) else []
    gpu_names = sorted({str(g.get("name")) for g in gpus if isinstance(g, dict) and g.get("name")})
    cpu = machine.get("cpu") if isinstance(machine.get("cpu"), dict) else {}
    return {
        "node": machine.get("node"),
        "cpu": cpu.get("brand_raw"),
        "gpu": ", ".join(gpu_names) or None,
        "gpu_count": machine.get("gpu_count", len(gpus) if gpus else None),
        "driver": machine.get("driver"),
        "cuda": machine.get("cuda"),
        "torch": machine.get("torch"),
        "python": machine.get("python_version"),
    }


def _benchmark_row(run: Run, bench: dict[str, Any]) -> dict[str, Any]:
    extra = bench.get("extra_info") or {}
    stats = bench["stats"]
    row: dict[str, Any] = {
        "run_id": run.run_id,
        "run_path": str(run.path),
        "machine_id": run.path.parent.name,
        "run_datetime": run.datetime,
        "group": bench.get("group"),
        "name": bench["name"],
        "fullname": bench["fullname"],
        "param": bench.get("param"),
        "params": bench.get("params"),
    }
    for key in _STAT_FIELDS:
        row[f"stats.{key}"] = _as_float(stats.get(key))
    data = stats.get("data")
    row["samples"] = [float(v) for v in data] if data else None
    # Columns the report computes itself: an extra_info key with the same name keeps its value
    # under "extra.<key>" instead of silently replacing ours.
    reserved = set(row) | _DERIVED
    for key in ("schema", "kind", "suite", "strategy", "workload", "world_size", "device_type",
                "backend", "profile", "collective"):
        row[key] = None  # always present, so plain pytest-benchmark files share the columns
    for key, value in extra.items():
        key = str(key)
        if key in reserved or key.startswith(("stats.", "machine.", "commit.")):
            key = f"extra.{key}"
        if key == "sampler" and isinstance(value, dict):
            row["sampler"] = value
            row["sampler.timeline"] = value.get("timeline")
        elif isinstance(value, dict):
            if key == "options":
                row["options"] = value
            for sub, subvalue in value.items():
                row[f"{key}.{sub}"] = subvalue
        else:
            row[key] = value
    steps = _as_float(extra.get("steps_per_round", extra.get("iters_per_round")))
    steps = steps if steps > 0 else 1.0
    # Each round of a training benchmark times run.step(k): per-step time = round time / k
    # (a communication benchmark's round likewise repeats its collective iters_per_round times).
    row["step_time_median"] = row["stats.median"] / steps
    row["step_samples"] = [v / steps for v in row["samples"]] if row["samples"] else None
    # Label with what the case asked for; `options` also holds every default the strategy filled in.
    options = _options_text(extra.get("requested_options", extra.get("options")))
    strategy = extra.get("strategy")
    if extra.get("kind") == "collective" and extra.get("collective") and not strategy:
        # Communication benchmarks are named by what they move, not by a strategy.
        strategy, options = str(extra["collective"]), fmt_bytes(extra.get("size_bytes"))
    row["strategy_label"] = f"{strategy}({options})" if strategy and options else (strategy or bench["name"])
    ws = extra.get("world_size")
    row["label"] = f"{row['strategy_label']} w{ws}" if strategy and ws is not None else row["strategy_label"]
    for key, value in machine_summary(run.machine_info).items():
        row[f"machine.{key}"] = value
    for key in ("id", "branch", "dirty", "time"):
        row[f"commit.{key}"] = run.commit_info.get(key)
    return row


def _short_run_names(runs: Sequence[Run]) -> dict[str, str]:
    stems = [r.path.stem for r in runs]
    return {r.run_id: (r.path.stem if stems.count(r.path.stem) == 1 else r.run_id) for r in runs}


def runs_frame(runs: Sequence[Run]) -> pd.DataFrame:
    """One row per benchmark per run; ``run`` is a short unique name of the run."""
    short = _short_run_names(runs)
    rows = []
    for run in runs:
        for bench in run.benchmarks:
            row = _benchmark_row(run, bench)
            row["run"] = short[run.run_id]
            rows.append(row)
    frame = pd.DataFrame(rows)
    # Labels name a case inside its workload; where two suites ran the same case, say which.
    key = ["run_id", "workload", "label"]
    dup = frame.duplicated(key, keep=False) & frame["suite"].notna()
    frame.loc[dup, "label"] = frame.loc[dup, "label"] + " [" + frame.loc[dup, "suite"].astype(str) + "]"
    dup = frame.duplicated(key, keep=False)
    frame.loc[dup, "label"] = frame.loc[dup, "label"] + " [" + frame.loc[dup, "name"] + "]"
    return frame


def load_runs(
    paths: str | os.PathLike | Sequence[str | os.PathLike] = (),
    *,
    results_dir: str | os.PathLike = DEFAULT_RESULTS_DIR,
) -> pd.DataFrame:
    """Load saved runs into one tidy DataFrame, the same frame ``dpbench report`` plots.

    ``paths``: result files, directories (their newest run per machine) or saved-run ids like
    ``0001``; empty means the newest run of each machine in ``results_dir``.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files = resolve_runs(list(paths), results_dir=results_dir)
    return runs_frame([read_run(p) for p in files])
