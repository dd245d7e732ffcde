"""The regression gate: compare candidate runs against baseline runs, benchmark by benchmark.

The unit of repetition is a *trial* (fresh worker processes), as in pyperf and asv: rounds
inside one process cannot show how much a whole case moves from process to process. Each
side may hold several runs; a side's trials are pooled per benchmark (run by run).

A benchmark *regressed* when the ratio of the medians of its trial times (the headline step
times, ``step_time_s``) exceeds the machine's own shift (the other benchmarks' median move, or the
controls' where the benchmarks as a whole moved beyond them: :mod:`dpbench.gate.family`) by more than
``threshold``, **and** is significant after Holm's correction over the distinct cases compared
against no change: a one-sided test on log trial times whose trial variance is moderated by a
log-normal prior over the family and whose between-run offset is log-normal across cases (see
:mod:`dpbench.gate.judge` for the noise model and :mod:`dpbench.gate.family` for the rule). The threshold ignores real
but unimportant changes; the test ignores noise that happens to cross it; the correction keeps
one job's false-alarm rate at most ``alpha`` however many benchmarks it holds.

The choices were made by simulating the gate (``python -m validation.simulate_gate``) from a noise
model fitted to real runs (:mod:`validation.noise`); docs/validation/gate.md has the tables.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

from dpbench.errors import UsageError
from dpbench.gate.family import Item, judge_family
from dpbench.gate.judge import Pooled
from dpbench.gate.sides import contention_note, kept, notes
from dpbench.gate.verdicts import BenchmarkComparison, Family, GateComparison, GateWarning, Verdict, WarningKind
from dpbench.results.load import (
    DEFAULT_RESULTS_DIR,
    MACHINE_FIELDS,
    ResultsError,
    is_dpbench,
    read_run,
    resolve_run,
)
from dpbench.results.units import fmt_ratio
from dpbench.stats import Threshold, median

__all__ = [
    "BenchmarkComparison",
    "GateComparison",
    "Family",
    "Pooled",
    "Verdict",
    "check_alpha",
    "compare_frames",
    "compare_runs",
    "machine_mismatches",
    "parse_threshold",
    "pool_side",
]

DEFAULT_THRESHOLD = 0.10
DEFAULT_ALPHA = 0.01  # the share of jobs with no regression that may fail: simulated 0.7-1.0% (docs/validation/gate.md)


def parse_threshold(text: str) -> float:
    """``"5%"`` or ``"0.05"`` → 0.05; a threshold must lie strictly between 0 and 1 (0% and 100%)."""
    raw = str(text).strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        value = math.nan
    if not 0 < value < 1:  # NaN too; "5" is ambiguous (5% or 500%?) and so refused
        raise UsageError(
            f"--threshold: expected a percentage like 10% or a fraction like 0.1, strictly "
            f"between 0 and 1, found {text!r}"
        )
    return value


def check_alpha(alpha: Any) -> float:
    """A significance level in (0, 0.5]: above a half a one-sided test says nothing."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha <= 0.5:
        raise UsageError(f"--alpha: expected a probability in (0, 0.5], found {alpha!r}")
    return float(alpha)


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _shown(value: Any) -> str:
    return "unknown" if _missing(value) else str(value)


def machine_differences(baseline: dict[str, Any], candidate: dict[str, Any]) -> dict[str, str]:
    """Each machine field that differs (``machine.*`` values of the two runs) → its line."""
    out = {}
    for key in MACHINE_FIELDS:
        b, c = baseline.get(key), candidate.get(key)
        if _missing(b) and _missing(c):
            continue
        if str(b) != str(c):
            out[key] = f"{key}: baseline {_shown(b)}, candidate {_shown(c)}"
    return out


def machine_mismatches(baseline: dict[str, Any], candidate: dict[str, Any]) -> list[str]:
    """One line per machine field that differs (:func:`machine_differences`)."""
    return list(machine_differences(baseline, candidate).values())


# ---------------------------------------------------------------- one side: its runs pooled
def _machine(frame: pd.DataFrame) -> dict[str, Any]:
    return {k: frame[f"machine.{k}"].iloc[0] if f"machine.{k}" in frame else None for k in MACHINE_FIELDS}


def _schema(frame: pd.DataFrame) -> str:
    found = sorted({int(v) for v in frame["schema"].dropna()}) if "schema" in frame else []
    return "/".join(map(str, found)) or "none"


def check_side(frame: pd.DataFrame, what: str) -> None:
    """A side pools trials only across runs of one schema on one kind of machine."""
    if frame.empty:
        raise ResultsError(f"{what}: expected the benchmarks of at least one run, found none")
    if frame["run_id"].nunique() == 1:
        return
    runs = {run_id: group for run_id, group in frame.groupby("run_id", sort=False)}
    schemas = {run_id: _schema(group) for run_id, group in runs.items()}
    if len(set(schemas.values())) > 1:
        listed = ", ".join(f"{r}: schema {s}" for r, s in schemas.items())
        raise ResultsError(f"{what}: runs of different schema versions ({listed}); pool only runs of one schema")
    (first, group), *rest = runs.items()
    reference = _machine(group)
    for run_id, other in rest:
        for line in machine_mismatches(reference, _machine(other)):
            key = line.split(":", 1)[0]
            raise ResultsError(
                f"{what}: runs from different machines ({key}: {first} has "
                f"{_shown(reference[key])}, {run_id} has {_shown(_machine(other)[key])}); "
                "pool only runs of one machine; to see machines side by side, use dpbench report RUN RUN"
            )


def pool_side(frame: pd.DataFrame, what: str) -> dict[str, Pooled]:
    """Per benchmark (``fullname``), the trials of every run of one side, run by run."""
    check_side(frame, what)
    rows = frame.drop_duplicates(["run_id", "fullname"], keep="last")
    out: dict[str, Pooled] = {}
    columns = ("fullname", "unit", "trial_times", "trial_controls", "incomparable", "case_key")
    for name, unit, times, controls, reason, key in zip(
        *(rows[c] if c in rows else [None] * len(rows) for c in columns)
    ):
        pooled = out.setdefault(
            name, Pooled(unit=str(unit), runs=[], control_runs=[], case_key=key if isinstance(key, str) else None)
        )
        # What the estimates use: re-measured trials in their slots, disturbed ones left out (NaN) dropped.
        pooled.runs.append(kept(times))
        pooled.control_runs.append(kept(controls))
        pooled.incomparable = pooled.incomparable or (reason if isinstance(reason, str) else None)
    return out


# ---------------------------------------------------------------- two sides
_RUNTIME_ENV = "harness_settings.user_runtime_env"


def _runtime_values(frame: pd.DataFrame) -> dict[str, set[str | None]]:
    """Per runtime variable (OpenMP/MKL/malloc, as the workers inherited them), the values one side ran
    with; None where a benchmark ran without it. Empty for runs that did not record them."""
    envs = [v for v in frame[_RUNTIME_ENV]] if _RUNTIME_ENV in frame else []
    envs = [v for v in envs if isinstance(v, dict)]
    names = sorted({k for env in envs for k in env})
    return {k: {None if env.get(k) is None else str(env[k]) for env in envs} for k in names}


def runtime_mismatches(baseline: pd.DataFrame, candidate: pd.DataFrame) -> list[str]:
    """One line per runtime variable the two sides ran with differently (only where both recorded them)."""
    if _RUNTIME_ENV not in baseline or _RUNTIME_ENV not in candidate:
        return []
    b, c = _runtime_values(baseline), _runtime_values(candidate)

    def shown(values: set[str | None]) -> str:
        return " / ".join("unset" if v is None else v for v in sorted(values, key=lambda v: (v is not None, v or "")))

    out = []
    for name in sorted(set(b) | set(c)):
        b_values, c_values = b.get(name, {None}), c.get(name, {None})
        if b_values != c_values:
            out.append(f"{name}: baseline {shown(b_values)}, candidate {shown(c_values)}")
    return out


def _side_warnings(
    baseline: pd.DataFrame, candidate: pd.DataFrame, judged: list[BenchmarkComparison], threshold: float
) -> list[GateWarning]:
    differences = machine_differences(_machine(baseline), _machine(candidate))
    warnings = [
        GateWarning(f"machines differ: {m}", kind=WarningKind.MACHINES, field=f) for f, m in differences.items()
    ]
    b_schema, c_schema = _schema(baseline), _schema(candidate)
    if b_schema != c_schema:
        warnings.append(
            GateWarning(
                f"schemas differ: baseline {b_schema}, candidate {c_schema} (schema 1 timed rounds in the "
                "calling process, schema 2 in the workers: expect a shift of the round-trip overhead)",
                kind=WarningKind.SCHEMAS,
            )
        )
    # The workers' runtimes read these when they start: a setting on one side only (a wait policy, malloc's
    # trim threshold) moves step times by itself (docs/validation/overhead.md, "Harness overhead: where the gap was").
    warnings += [
        GateWarning(
            f"runtime settings differ: {m} (the workers' runtimes read it: a change may be that setting)",
            kind=WarningKind.RUNTIME,
        )
        for m in runtime_mismatches(baseline, candidate)
    ]
    b_profiles, c_profiles = set(baseline["profile"].dropna()), set(candidate["profile"].dropna())
    if b_profiles and c_profiles and b_profiles != c_profiles:
        warnings.append(
            GateWarning(
                f"profiles differ: baseline {sorted(b_profiles)}, candidate {sorted(c_profiles)}",
                kind=WarningKind.PROFILES,
            )
        )
    controls = [b.control_ratio for b in judged if b.control_ratio > 0]
    moved = median(controls)
    if controls and Threshold(threshold).beyond(moved):
        warnings.append(
            GateWarning(
                f"the controls of all benchmarks moved {fmt_ratio(moved)} (median over {len(controls)}): "
                "the machine changed between baseline and candidate",
                kind=WarningKind.CONTROLS,
            )
        )
    return warnings


def _check_aa(baseline: pd.DataFrame, frame: pd.DataFrame) -> None:
    """--aa runs are more runs of the baseline's code on the baseline's machine, or useless."""
    for line in machine_mismatches(_machine(baseline), _machine(frame)):
        raise ResultsError(
            f"--aa run from another machine than the baseline ({line}); A/A runs must come from the baseline's machine"
        )
    if _schema(baseline) != _schema(frame):
        raise ResultsError(f"--aa run of schema {_schema(frame)}, baseline of schema {_schema(baseline)}")


def compare_frames(
    baseline: pd.DataFrame,
    candidate: pd.DataFrame,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = DEFAULT_ALPHA,
    baseline_name: str = "baseline",
    candidate_name: str = "candidate",
    aa: Sequence[pd.DataFrame] | None = None,
    allow_missing: bool = False,
    paired: bool = False,
    baseline_levels: dict[str, tuple[Pooled, str]] | None = None,
) -> GateComparison:
    """Compare two sides, each a frame from :func:`dpbench.results.frame.runs_frame` of one or more runs.

    ``aa``: more runs of the baseline's code on its machine (A/A references): the between-run
    spread is then at least what they show. ``paired``: run i of the baseline ran beside run i
    of the candidate (``dpbench ab``); the test takes the log ratios of those pairs.
    ``baseline_levels``: per benchmark (full name), a baseline to judge against instead of the
    baseline runs' own trials, and the note its verdict carries (``--history``: the level after
    an accepted change, :func:`dpbench.history.series.accepted_levels`, as ``Pooled`` sides).
    """
    check_alpha(alpha)
    if not 0 < threshold < 1:
        raise UsageError(f"--threshold: expected a fraction strictly between 0 and 1, found {threshold!r}")
    base, cand = pool_side(baseline, "baseline"), pool_side(candidate, "candidate")
    levels = {name: level for name, level in (baseline_levels or {}).items() if name in base}
    if paired and levels:
        raise UsageError(
            "--history with --paired: a pair's baseline ran beside its candidate, and an accepted "
            "level from other commits would break the pairs; compare without --paired"
        )
    for name, (side, _) in levels.items():
        base[name] = side
    if paired and baseline["run_id"].nunique() != candidate["run_id"].nunique():
        raise UsageError(
            f"--paired: expected as many baseline runs as candidate runs, found "
            f"{baseline['run_id'].nunique()} and {candidate['run_id'].nunique()}"
        )
    common = [n for n in base if n in cand]
    if not common:
        raise ResultsError(
            f"{baseline_name} and {candidate_name} have no benchmark in common "
            f"({len(base)} vs {len(cand)} benchmarks): nothing to compare"
        )
    references = []
    for frame in aa or []:
        _check_aa(baseline, frame)
        references.append(pool_side(frame, "--aa run"))
    cmp = GateComparison(
        baseline=baseline_name,
        candidate=candidate_name,
        threshold=threshold,
        alpha=alpha,
        allow_missing=allow_missing,
        paired=paired,
    )
    contended = contention_note(baseline, candidate, ("baseline", "candidate"))
    judged, cmp.family = judge_family(
        [Item(name=n, base=base[n], cand=cand[n]) for n in common],
        threshold=threshold,
        alpha=alpha,
        paired=paired,
        aa=references,
        aa_base=base,
        contention=contended,
    )
    disturbed = notes(baseline, candidate)
    for b in judged:
        if b.name in levels:
            b.note = "; ".join(filter(None, [b.note, levels[b.name][1]]))
        if b.name in disturbed:
            b.note = "; ".join(filter(None, [b.note, disturbed[b.name]]))
    cmp.benchmarks.extend(judged)
    for name in (n for n in base if n not in cand):
        cmp.benchmarks.append(
            BenchmarkComparison(
                name=name,
                verdict=Verdict.MISSING,
                unit=base[name].unit,
                threshold=threshold,
                baseline_s=median(base[name].times),
                baseline_trials=len(base[name].times),
                note="in the baseline, not in the candidate",
            )
        )
    for name in (n for n in cand if n not in base):
        cmp.benchmarks.append(
            BenchmarkComparison(
                name=name,
                verdict=Verdict.NEW,
                unit=cand[name].unit,
                threshold=threshold,
                candidate_s=median(cand[name].times),
                candidate_trials=len(cand[name].times),
            )
        )
    order = {v: i for i, v in enumerate(Verdict)}
    cmp.benchmarks.sort(key=lambda b: (order[b.verdict], -(b.ratio if not math.isnan(b.ratio) else 0)))
    cmp.warnings = _side_warnings(baseline, candidate, cmp.benchmarks, threshold)
    if contended:
        cmp.warnings.append(
            GateWarning(
                f"{contended}: the timings carry that load, and the controls may have missed it",
                kind=WarningKind.CONTENTION,
            )
        )
    return cmp


def _side(specs: str | os.PathLike | Sequence[str | os.PathLike], what: str, results_dir: str | os.PathLike):
    from dpbench.results.frame import runs_frame

    specs = [specs] if isinstance(specs, (str, os.PathLike)) else list(specs)
    if not specs:
        raise ResultsError(f"{what}: expected at least one run, found none")
    paths = [resolve_run(spec, results_dir=results_dir) for spec in specs]
    for i, p in enumerate(paths):
        if p in paths[:i]:
            raise ResultsError(f"{what}: run {p} is given twice; pooling it twice would count its trials twice")
    name = str(paths[0]) if len(paths) == 1 else f"{len(paths)} runs: " + ", ".join(str(p) for p in paths)
    runs = [read_run(p) for p in paths]
    for run in runs:
        if not any(is_dpbench(b.get("extra_info") or {}) for b in run.benchmarks):
            raise ResultsError(
                f"{run.path}: expected dpbench's extra_info (its schema and fresh-process trials), found a plain "
                "pytest-benchmark run without it; compare runs the dpbench suites saved "
                "(pytest suites/ --benchmark-save=NAME)"
            )
    return runs_frame(runs), name


def compare_runs(
    baseline: str | os.PathLike | Sequence[str | os.PathLike],
    candidate: str | os.PathLike | Sequence[str | os.PathLike],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = DEFAULT_ALPHA,
    results_dir: str | os.PathLike = DEFAULT_RESULTS_DIR,
    aa: Sequence[str | os.PathLike] | None = None,
    allow_missing: bool = False,
    paired: bool = False,
    baseline_levels: Callable[[pd.DataFrame], tuple[dict[str, tuple[Pooled, str]], list[str]]] | None = None,
) -> GateComparison:
    """Resolve and load each side's runs (files, directories → their newest run, or ids) and
    compare them; ``aa`` optionally names more runs of the baseline's code. ``baseline_levels``
    maps the baseline's frame to replacement baselines and warnings (``--history``: built by
    the gate's command from :func:`dpbench.history.series.accepted_levels`)."""
    base, base_name = _side(baseline, "baseline", results_dir)
    cand, cand_name = _side(candidate, "candidate", results_dir)
    references = [_side(spec, "--aa run", results_dir)[0] for spec in aa or []]
    levels, said = baseline_levels(base) if baseline_levels is not None else ({}, [])
    cmp = compare_frames(
        base,
        cand,
        threshold=threshold,
        alpha=alpha,
        baseline_name=base_name,
        candidate_name=cand_name,
        aa=references,
        allow_missing=allow_missing,
        paired=paired,
        baseline_levels=levels,
    )
    cmp.warnings = [GateWarning(w, kind=WarningKind.HISTORY) for w in said] + cmp.warnings
    return cmp
