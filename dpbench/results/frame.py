"""Saved runs as one tidy DataFrame: one row per benchmark per run, ``extra_info`` flattened.

Beside the flattened fields, each row carries the readings the report and the gate share
(one definition, used everywhere):

- ``step_time_s``: seconds per step (training) or per call (collective) by the reading rules
  of schema 2; NaN, with the reason in ``incomparable``, where it cannot be derived.
- ``unit``: what ``step_time_s`` counts (``s/step``, ``s/call``, ``s/round`` for a plain
  pytest-benchmark benchmark); two benchmarks compare only in the same unit.
- ``trial_times`` / ``trial_controls`` / ``trials_count``: one value per fresh-process trial
  (a schema-1 benchmark is one trial, without a control), NaN in the slot of a disturbed trial that
  every estimate leaves out (:mod:`dpbench.results.disturbed`); ``trial_cv`` their spread.
- ``disturbed``: the benchmark's disturbed trials (index, why, replaced, left out, their numbers);
  ``disturbed_unreplaced``: how many of them no re-measurement replaced.
- ``step_time_ci95_lo/hi``: the 95% interval of the central step time from the trials.
- ``samples_per_s`` (= global_batch / step_time_s) and its interval.
- ``step_samples``: every measured round in seconds per step (or call), where usable.
"""
from __future__ import annotations

import math
import os
from typing import Any, Sequence

import pandas as pd

from dpbench.results.disturbed import mark_disturbed
from dpbench.results.load import DEFAULT_RESULTS_DIR, SavedRun, is_dpbench, read_run, resolve_runs
from dpbench.decision.contention import foreign_cpu
from dpbench.stats import coefficient_of_variation, log_t_interval, median, positive
from dpbench.results.units import fmt_bytes
from dpbench.schema import Kind

__all__ = ["UNITS", "load_runs", "machine_summary", "runs_frame"]

UNITS = {Kind.TRAINING.value: "s/step", Kind.COLLECTIVE.value: "s/call", None: "s/round"}
_STAT_FIELDS = ("min", "max", "mean", "stddev", "median", "iqr", "q1", "q3", "ops", "total",
                "rounds", "iterations")
# Columns the report computes itself: an extra_info key with one of these names keeps its
# value under "extra.<key>" instead of silently replacing ours.
_DERIVED = {"run", "step_time_s", "step_samples", "strategy_label", "label", "samples_per_s", "unit",
            "trial_times", "trial_controls", "trials_count", "trial_cv", "control_median_s", "control_cv",
            "step_time_ci95_lo", "step_time_ci95_hi", "samples_per_s_ci95_lo", "samples_per_s_ci95_hi",
            "incomparable", "clock_warnings", "trial_timelines", "disturbed", "disturbed_unreplaced",
            "run_control_spread", "foreign_cpu"}
_ALWAYS = ("schema", "kind", "suite", "strategy", "workload", "world_size", "device_type", "backend", "profile",
           "collective", "case_key", "global_batch")


def _as_float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


def _interval(value: Any) -> tuple[float, float]:
    """``[lo, hi]`` from a results file, NaNs unless it is two ordered positive numbers."""
    if isinstance(value, (list, tuple)) and len(value) == 2:
        lo, hi = _as_float(value[0]), _as_float(value[1])
        if 0 < lo <= hi < math.inf:
            return lo, hi
    return math.nan, math.nan


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


# ---------------------------------------------------------------- the reading rules
def _step_time(bench: dict[str, Any], extra: dict[str, Any], schema: int | None) -> dict[str, Any]:
    """``step_time_s``, ``unit``, ``step_samples`` and why the time is unknown (schema2.md)."""
    stats = bench["stats"]
    rounds = positive(stats.get("data")) or None
    if not is_dpbench(extra):  # someone else's benchmark: pytest-benchmark's own time per round
        return {"step_time_s": _as_float(stats["median"]), "unit": UNITS[None], "step_samples": rounds,
                "incomparable": None}
    trials = extra.get("trials") if isinstance(extra.get("trials"), dict) else {}
    trial_times = positive(trials.get("step_time_s"))
    if extra.get("kind") == Kind.COLLECTIVE.value:
        time_s = _as_float(extra.get("time_s"))
        if not time_s > 0 and trial_times:
            time_s = median(trial_times)
        return {
            "step_time_s": time_s if time_s > 0 else math.nan, "unit": UNITS[Kind.COLLECTIVE.value],
            # Schema-1 rounds were timed in the calling process: round time / iters is not the
            # workers' time per call, so they never stand in for it.
            "step_samples": rounds if schema is not None and schema >= 2 else None,
            "incomparable": None if time_s > 0 else "no worker-measured time per call (extra_info.time_s)",
        }
    unit = UNITS[Kind.TRAINING.value]
    if schema is not None and schema >= 2:  # stats.data are seconds per step already
        step = _as_float(extra.get("step_time_s"))
        if not step > 0 and trial_times:
            step = median(trial_times)
        reason = None if step > 0 else "no per-step time (extra_info.step_time_s or trials)"
        return {"step_time_s": step if step > 0 else math.nan, "unit": unit, "step_samples": rounds,
                "incomparable": reason}
    steps = _as_float(extra.get("steps_per_round"))
    if not steps > 0:
        return {"step_time_s": math.nan, "unit": unit, "step_samples": None,
                "incomparable": "schema-1 training benchmark without steps_per_round: its per-step time is unknown"}
    # Schema 1: one round timed run.step(k) in the calling process, so a step is a round / k.
    return {"step_time_s": _as_float(stats["median"]) / steps, "unit": unit,
            "step_samples": [v / steps for v in rounds] if rounds else None, "incomparable": None}


def _clock_warnings(extra: dict[str, Any], trials: dict[str, Any]) -> list[str]:
    """The sampler's clock warnings (GPU throttling, unlocked clocks) of every trial."""
    samplers = trials.get("sampler") if isinstance(trials.get("sampler"), list) else []
    if not samplers and isinstance(extra.get("sampler"), dict):
        samplers = [extra["sampler"]]  # no per-trial summaries: the one the benchmark kept
    warnings = []
    for i, sampler in enumerate(samplers):
        found = sampler.get("clock_warnings") if isinstance(sampler, dict) else None
        if isinstance(found, list):
            warnings += [f"trial {i + 1}: {w}" for w in found if isinstance(w, str)]
    return warnings


def _trials(extra: dict[str, Any], step_time: float) -> dict[str, Any]:
    """Per-trial values; a benchmark without trials (schema 1, plain) is one trial, no control."""
    trials = extra.get("trials") if isinstance(extra.get("trials"), dict) else {}
    times = positive(trials.get("step_time_s"))
    if not times and step_time > 0:
        times = [step_time]
    controls = positive(trials.get("control_s"))
    cv = _as_float(trials.get("cv"))
    warnings = _clock_warnings(extra, trials)
    timelines = trials.get("timelines") if isinstance(trials.get("timelines"), list) else []
    return {
        "trial_times": times, "trial_controls": controls, "trials_count": len(times),
        "trial_cv": cv if cv >= 0 else coefficient_of_variation(times),
        "control_median_s": median(controls), "control_cv": coefficient_of_variation(controls),
        "clock_warnings": warnings, "trial_timelines": [t if isinstance(t, str) else None for t in timelines],
    }


def _readings(bench: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    schema = extra.get("schema") if isinstance(extra.get("schema"), int) else None
    out = _step_time(bench, extra, schema)
    out.update(_trials(extra, out["step_time_s"]))
    ci_key = "time_ci95" if extra.get("kind") == Kind.COLLECTIVE.value else "step_time_ci95"
    lo, hi = _interval(extra.get(ci_key))
    if math.isnan(lo):  # not written (schema 1) or unusable: the same interval from the trials
        lo, hi = log_t_interval(out["trial_times"])
    out["step_time_ci95_lo"], out["step_time_ci95_hi"] = lo, hi
    # One throughput everywhere (tables, plots, summary, gate): global batch / step time.
    batch = _as_float(extra.get("global_batch")) if extra.get("kind") != Kind.COLLECTIVE.value else math.nan
    batch = batch if batch > 0 else math.nan
    out["samples_per_s"] = batch / out["step_time_s"]
    out["samples_per_s_ci95_lo"], out["samples_per_s_ci95_hi"] = batch / hi, batch / lo
    return out


# ---------------------------------------------------------------- rows
def _flatten(row: dict[str, Any], extra: dict[str, Any]) -> None:
    reserved = (set(row) - set(_ALWAYS)) | _DERIVED
    for key, value in extra.items():
        key = str(key)
        if key in reserved or key.startswith(("stats.", "machine.", "commit.")):
            key = f"extra.{key}"
        if key == "sampler" and isinstance(value, dict):
            row["sampler"] = value
            row["sampler.timeline"] = value.get("timeline")
        elif isinstance(value, dict):
            if key in ("options", "trials", "fingerprint"):  # read whole (fingerprint: results/fingerprint.py)
                row[key] = value
            for sub, subvalue in value.items():
                row[f"{key}.{sub}"] = subvalue
        else:
            row[key] = value
        if key.endswith("_ci95"):  # [lo, hi] intervals as two numeric columns
            row[f"{key}_lo"], row[f"{key}_hi"] = _interval(value)


def _label(row: dict[str, Any], extra: dict[str, Any], name: str) -> None:
    # Label with what the case asked for; `options` also holds every default the strategy filled in.
    options = _options_text(extra.get("requested_options", extra.get("options")))
    strategy = extra.get("strategy")
    if extra.get("kind") == Kind.COLLECTIVE.value and extra.get("collective") and not strategy:
        # Communication benchmarks are named by what they move, not by a strategy.
        strategy, options = str(extra["collective"]), fmt_bytes(extra.get("size_bytes"))
    row["strategy_label"] = f"{strategy}({options})" if strategy and options else (strategy or name)
    ws = extra.get("world_size")
    row["label"] = f"{row['strategy_label']} w{ws}" if strategy and ws is not None else row["strategy_label"]


def _benchmark_row(run: SavedRun, bench: dict[str, Any]) -> dict[str, Any]:
    extra = bench.get("extra_info") or {}
    stats = bench["stats"]
    row: dict[str, Any] = {
        "run_id": run.run_id, "run_path": str(run.path), "machine_id": run.path.parent.name,
        "run_datetime": run.datetime, "group": bench.get("group"), "name": bench["name"],
        "fullname": bench["fullname"], "param": bench.get("param"), "params": bench.get("params"),
    }
    for key in _STAT_FIELDS:
        row[f"stats.{key}"] = _as_float(stats.get(key))
    data = stats.get("data")
    row["samples"] = [float(v) for v in data] if data else None
    for key in _ALWAYS:
        row[key] = None  # always present, so plain pytest-benchmark files share the columns
    _flatten(row, extra)
    row.update(_readings(bench, extra))
    row["foreign_cpu"] = foreign_cpu(extra.get("trials") or {}, run.machine_info.get("cpu_count"))
    _label(row, extra, bench["name"])
    for key, value in machine_summary(run.machine_info).items():
        row[f"machine.{key}"] = value
    for key in ("id", "branch", "dirty", "time"):
        row[f"commit.{key}"] = run.commit_info.get(key)
    return row


def _short_run_names(runs: Sequence[SavedRun]) -> dict[str, str]:
    stems = [r.path.stem for r in runs]
    return {r.run_id: (r.path.stem if stems.count(r.path.stem) == 1 else r.run_id) for r in runs}


def runs_frame(runs: Sequence[SavedRun]) -> pd.DataFrame:
    """One row per benchmark per run; ``run`` is a short unique name of the run."""
    short = _short_run_names(runs)
    rows = []
    for run in runs:
        mine = []
        for bench in run.benchmarks:
            row = _benchmark_row(run, bench)
            row["run"] = short[run.run_id]
            row["disturbed"], row["disturbed_unreplaced"] = [], 0
            mine.append(row)
        mark_disturbed(mine)  # one run's trials judged against that run's own spread
        rows += mine
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
