"""The regression gate: compare candidate runs against baseline runs, benchmark by benchmark.

The unit of repetition is a *trial* (fresh worker processes), as in pyperf and asv: rounds
inside one process cannot show how much a whole case moves from process to process. Each
side may hold several runs; a side's trials are pooled per benchmark.

A benchmark *regressed* when the median of the candidate's trial times is slower than the
baseline's by more than ``threshold`` **and** that excess is significant: a one-sided Welch
t-test of log(candidate trials) against log(baseline trials) + log(1 + threshold), p < alpha.
The threshold ignores real but unimportant changes; the test ignores noise that happens to
cross it.

Each side's sd in that test is at least the run's typical between-trial spread (the median
over the compared benchmarks, :func:`spread_floor`): with 6 trials, one benchmark's sample sd
comes out at a third of the truth often enough that plain Welch flagged 2 of 200 unchanged
15-benchmark runs at CV 8% (scripts/bench_gate_power.py; about 0.6 per 200 in the long run);
with the floor, 0 of 200 and about 0.1 per 200, at the same detection of a 40% slowdown.

Welch on logs rather than Mann-Whitney: with 3-6 trials a side, Mann-Whitney's exact p cannot
go below 1/C(n+m, n) (0.05 at 3 vs 3, 0.014 at 4 vs 4), so at 3 trials it can never detect
anything and at 4 it caught fewer 40% slowdowns in the same study. With a single trial on
either side the test falls back to the rounds (Mann-Whitney on the shifted rounds), which
cannot see process-to-process variance; the note says so.

A slowdown whose control moved as much (the control computation, timed in the same workers,
got slower too) is *inconclusive*: the machine changed, not (only) the code.
"""
from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Sequence

import pandas as pd

from dpbench.results.load import DEFAULT_RESULTS_DIR, ResultsError, read_run, resolve_run
from dpbench.stats import median
from dpbench.results.units import fmt_ratio

__all__ = [
    "MACHINE_FIELDS",
    "BenchmarkComparison",
    "Comparison",
    "Verdict",
    "compare_frames",
    "compare_runs",
    "machine_mismatches",
    "parse_threshold",
]

DEFAULT_THRESHOLD = 0.10
DEFAULT_ALPHA = 0.05
# Fields of the machine that change benchmark numbers on their own (machine.* columns).
MACHINE_FIELDS = ("gpu", "gpu_count", "driver", "cuda", "torch", "cpu")
ONE_TRIAL_NOTE = "one trial per side: process-to-process variance is not covered"


class Verdict(str, Enum):
    """A benchmark's verdict; saved in ``--json`` output, so the strings never change."""

    REGRESSED = "regressed"  # slower beyond the threshold, significant, the control steady
    IMPROVED = "improved"
    UNCHANGED = "unchanged"
    INCONCLUSIVE = "inconclusive"  # slower beyond the threshold, but not significant or the control moved
    INCOMPARABLE = "incomparable"  # the per-step time is not derivable the same way on both sides
    MISSING = "missing"  # in the baseline, not in the candidate
    NEW = "new"  # only in the candidate


@dataclass(kw_only=True)
class BenchmarkComparison:
    name: str
    verdict: Verdict
    unit: str = ""
    baseline_s: float = math.nan  # median of the pooled trial times (seconds per step or call)
    candidate_s: float = math.nan
    ratio: float = math.nan  # candidate / baseline: > 1 is slower
    threshold: float = math.nan  # this benchmark's (--aa can raise it)
    p_value: float = math.nan
    test: str = ""
    baseline_trials: int = 0
    candidate_trials: int = 0
    control_ratio: float = math.nan  # median candidate control / median baseline control
    note: str = ""


@dataclass(kw_only=True)
class Comparison:
    baseline: str
    candidate: str
    threshold: float
    alpha: float
    allow_missing: bool = False
    warnings: list[str] = field(default_factory=list)
    benchmarks: list[BenchmarkComparison] = field(default_factory=list)

    def of(self, verdict: Verdict) -> list[BenchmarkComparison]:
        return [b for b in self.benchmarks if b.verdict == verdict]

    @property
    def regressions(self) -> list[BenchmarkComparison]:
        return self.of(Verdict.REGRESSED)

    @property
    def counts(self) -> dict[str, int]:
        return {v.value: len(self.of(v)) for v in Verdict}

    @property
    def exit_code(self) -> int:
        """1 on a regression, and when the candidate lost benchmarks (unless allowed); else 0."""
        if self.regressions or (self.of(Verdict.MISSING) and not self.allow_missing):
            return 1
        return 0


def parse_threshold(text: str) -> float:
    """``"5%"`` or ``"0.05"`` → 0.05."""
    raw = str(text).strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        value = math.nan
    if not raw.endswith("%") and value >= 1:
        value = math.nan  # "5" is ambiguous: 5% or 500%?
    if not (0 <= value < 10) or math.isnan(value):
        raise ResultsError(f"--threshold: expected a percentage like 10% or a fraction like 0.1, found {text!r}")
    return value


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _shown(value: Any) -> str:
    return "unknown" if _missing(value) else str(value)


def machine_mismatches(baseline: dict[str, Any], candidate: dict[str, Any]) -> list[str]:
    """One line per machine field that differs (``machine.*`` values of the two runs)."""
    out = []
    for key in MACHINE_FIELDS:
        b, c = baseline.get(key), candidate.get(key)
        if _missing(b) and _missing(c):
            continue
        if str(b) != str(c):
            out.append(f"{key}: baseline {_shown(b)}, candidate {_shown(c)}")
    return out


# ---------------------------------------------------------------- one side: its runs pooled
@dataclass(kw_only=True)
class Pooled:
    """One benchmark's trials on one side, pooled over the side's runs (in run order)."""

    unit: str
    times: list[float]
    controls: list[float]
    rounds: list[float] | None  # per-step (per-call) rounds; None where unusable
    incomparable: str | None


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
            raise ResultsError(f"{what}: runs from different machines ({key}: {first} has "
                               f"{_shown(reference[key])}, {run_id} has {_shown(_machine(other)[key])}); "
                               "pool only runs of one machine")


def pool_side(frame: pd.DataFrame, what: str) -> dict[str, Pooled]:
    """Per benchmark (``fullname``), the trials of every run of one side, concatenated."""
    check_side(frame, what)
    rows = frame.drop_duplicates(["run_id", "fullname"], keep="last")
    out: dict[str, Pooled] = {}
    columns = ("fullname", "unit", "trial_times", "trial_controls", "step_samples", "incomparable")
    for name, unit, times, controls, rounds, reason in zip(*(rows[c] for c in columns)):
        pooled = out.get(name)
        if pooled is None:
            out[name] = Pooled(unit=str(unit), times=list(times), controls=list(controls),
                               rounds=list(rounds) if isinstance(rounds, list) else None,
                               incomparable=reason if isinstance(reason, str) else None)
            continue
        pooled.times += times
        pooled.controls += controls
        # Rounds pool only where every run has them: a gap would weigh the runs unevenly.
        pooled.rounds = pooled.rounds + list(rounds) if isinstance(rounds, list) and pooled.rounds else None
        pooled.incomparable = pooled.incomparable or (reason if isinstance(reason, str) else None)
    return out


# ---------------------------------------------------------------- one benchmark
def _log_spread(times: list[float]) -> float:
    """The standard deviation of the log trial times (NaN with fewer than two)."""
    return statistics.stdev(math.log(v) for v in times) if len(times) >= 2 else math.nan


def spread_floor(pairs: Sequence[tuple[Pooled, Pooled]]) -> float:
    """The run's typical between-trial spread: the median over benchmarks of each one's pooled
    log-sd (both sides). Every benchmark of a run sees the same machine, so this is measured on
    all of them at once, where one benchmark's 6 trials can come out far too steady by chance."""
    spreads = [math.sqrt((_log_spread(b.times) ** 2 + _log_spread(c.times) ** 2) / 2)
               for b, c in pairs if len(b.times) >= 2 and len(c.times) >= 2]
    return median(spreads) if spreads else math.nan


def _welch(x: list[float], y: list[float], alternative: str, floor: float) -> tuple[float, bool]:
    """Welch's t-test (scipy) on ``x`` and ``y`` with each side's sd at least ``floor``;
    whether the floor was used."""
    from scipy import stats

    sx, sy = statistics.stdev(x), statistics.stdev(y)
    floored = floor > max(sx, sy)
    if floor > 0:
        sx, sy = max(sx, floor), max(sy, floor)
    result = stats.ttest_ind_from_stats(statistics.fmean(x), sx, len(x), statistics.fmean(y), sy, len(y),
                                        equal_var=False, alternative=alternative)
    return float(result.pvalue), floored


def _significance(base: Pooled, cand: Pooled, threshold: float, slower: bool,
                  floor: float) -> tuple[float, str, str, bool]:
    """``(p, test, note, floored)``: is the candidate beyond the threshold in the direction it moved?"""
    from scipy import stats

    factor = 1 + threshold if slower else 1 - threshold
    if factor <= 0:
        return math.nan, "none", "", False
    alternative = "greater" if slower else "less"
    if len(base.times) >= 2 and len(cand.times) >= 2:
        x = [math.log(v) for v in cand.times]
        y = [math.log(v) + math.log(factor) for v in base.times]
        p, floored = _welch(x, y, alternative, floor)
        return p, "welch-t on log trials", "", floored
    if base.rounds and cand.rounds and len(base.rounds) >= 2 and len(cand.rounds) >= 2:
        p = float(stats.mannwhitneyu(cand.rounds, [v * factor for v in base.rounds], alternative=alternative).pvalue)
        return p, "mann-whitney on rounds", ONE_TRIAL_NOTE, False
    return math.nan, "none", f"{ONE_TRIAL_NOTE}, and no rounds to test", False


def _control_note(control_ratio: float) -> str:
    return f"the control moved {fmt_ratio(control_ratio)}: the machine changed, not (only) the code"


def judge(name: str, base: Pooled, cand: Pooled, *, threshold: float, alpha: float,
          floor: float = math.nan) -> BenchmarkComparison:
    """The verdict on one benchmark present on both sides; ``floor`` (see :func:`spread_floor`)
    is the smallest log-sd the test assumes for either side's trials."""
    out = BenchmarkComparison(name=name, verdict=Verdict.UNCHANGED, unit=cand.unit, threshold=threshold,
                              baseline_trials=len(base.times), candidate_trials=len(cand.times))
    reason = (f"baseline: {base.incomparable}" if base.incomparable else
              f"candidate: {cand.incomparable}" if cand.incomparable else
              f"baseline measures {base.unit}, candidate {cand.unit}" if base.unit != cand.unit else None)
    if reason or not base.times or not cand.times:
        out.verdict, out.note = Verdict.INCOMPARABLE, reason or "no trial times"
        return out
    out.baseline_s, out.candidate_s = median(base.times), median(cand.times)
    out.ratio = out.candidate_s / out.baseline_s
    if base.controls and cand.controls:
        out.control_ratio = median(cand.controls) / median(base.controls)
    slower, faster = out.ratio > 1 + threshold, out.ratio < 1 - threshold
    out.p_value, out.test, note, floored = _significance(base, cand, threshold, slower=out.ratio >= 1, floor=floor)
    significant = out.p_value < alpha  # False for NaN: no test, no claim
    notes = [note]
    if floored and (slower or faster):  # worth a word only where it could decide
        notes.append(f"trial spread taken as the run's typical {math.expm1(floor):.1%}, above this benchmark's")
    if slower and significant and out.control_ratio > 1 + threshold:
        out.verdict = Verdict.INCONCLUSIVE
        notes.append(_control_note(out.control_ratio))
    elif slower and significant:
        out.verdict = Verdict.REGRESSED
    elif slower:
        out.verdict = Verdict.INCONCLUSIVE
        found = "no test was possible" if math.isnan(out.p_value) else f"p = {out.p_value:.2g}"
        notes.append(f"slower by {fmt_ratio(out.ratio)} but {found} with {out.baseline_trials} vs "
                     f"{out.candidate_trials} trials: too few trials to reach p < {alpha:g} at this spread")
    elif faster and significant and out.control_ratio < 1 - threshold:
        out.verdict = Verdict.INCONCLUSIVE  # an "improvement" the machine made is no claim either
        notes.append(_control_note(out.control_ratio))
    elif faster and significant:
        out.verdict = Verdict.IMPROVED
    out.note = "; ".join(n for n in notes if n)
    return out


# ---------------------------------------------------------------- two sides
def _aa_spread(base: dict[str, Pooled], aa: dict[str, Pooled]) -> dict[str, float]:
    """Per benchmark, |median of the A/A run's trials / median of the baseline's − 1|."""
    spread = {}
    for name in base.keys() & aa.keys():
        b, a = median(base[name].times), median(aa[name].times)
        if b > 0 and a > 0:
            spread[name] = abs(a / b - 1)
    return spread


def _side_warnings(baseline: pd.DataFrame, candidate: pd.DataFrame, judged: list[BenchmarkComparison],
                   threshold: float) -> list[str]:
    warnings = [f"machines differ: {m}" for m in machine_mismatches(_machine(baseline), _machine(candidate))]
    b_schema, c_schema = _schema(baseline), _schema(candidate)
    if b_schema != c_schema:
        warnings.append(f"schemas differ: baseline {b_schema}, candidate {c_schema} (schema 1 timed rounds in the "
                        "calling process, schema 2 in the workers: expect a shift of the round-trip overhead)")
    b_profiles, c_profiles = set(baseline["profile"].dropna()), set(candidate["profile"].dropna())
    if b_profiles and c_profiles and b_profiles != c_profiles:
        warnings.append(f"profiles differ: baseline {sorted(b_profiles)}, candidate {sorted(c_profiles)}")
    controls = [b.control_ratio for b in judged if b.control_ratio > 0]
    moved = median(controls)
    if controls and (moved > 1 + threshold or moved < 1 - threshold):
        warnings.append(f"the controls of all benchmarks moved {fmt_ratio(moved)} (median over {len(controls)}): "
                        "the machine changed between baseline and candidate")
    return warnings


def compare_frames(baseline: pd.DataFrame, candidate: pd.DataFrame, *, threshold: float = DEFAULT_THRESHOLD,
                   alpha: float = DEFAULT_ALPHA, baseline_name: str = "baseline",
                   candidate_name: str = "candidate", aa: Sequence[pd.DataFrame] | None = None,
                   allow_missing: bool = False) -> Comparison:
    """Compare two sides, each a frame from :func:`dpbench.report.load_runs` of one or more runs.

    ``aa``: more runs of the baseline's code (A/A references): each benchmark's threshold
    becomes at least the largest change between the baseline and an A/A run.
    """
    if not 0 < alpha < 1:
        raise ResultsError(f"--alpha: expected a probability between 0 and 1, found {alpha!r}")
    base, cand = pool_side(baseline, "baseline"), pool_side(candidate, "candidate")
    common = [n for n in base if n in cand]
    if not common:
        raise ResultsError(f"{baseline_name} and {candidate_name} have no benchmark in common "
                           f"({len(base)} vs {len(cand)} benchmarks): nothing to compare")
    spread: dict[str, float] = {}
    for frame in aa or []:
        for name, change in _aa_spread(base, pool_side(frame, "--aa run")).items():
            spread[name] = max(spread.get(name, 0.0), change)
    cmp = Comparison(baseline=baseline_name, candidate=candidate_name, threshold=threshold, alpha=alpha,
                     allow_missing=allow_missing)
    floor = spread_floor([(base[n], cand[n]) for n in common if not (base[n].incomparable or cand[n].incomparable)])
    for name in common:
        own = max(threshold, spread.get(name, 0.0))
        result = judge(name, base[name], cand[name], threshold=own, alpha=alpha, floor=floor)
        if own > threshold:
            result.note = "; ".join(filter(None, [result.note, f"threshold {own:.1%} from the A/A runs"]))
        cmp.benchmarks.append(result)
    for name in (n for n in base if n not in cand):
        cmp.benchmarks.append(BenchmarkComparison(name=name, verdict=Verdict.MISSING, unit=base[name].unit,
                                                  threshold=threshold, baseline_s=median(base[name].times),
                                                  baseline_trials=len(base[name].times),
                                                  note="in the baseline, not in the candidate"))
    for name in (n for n in cand if n not in base):
        cmp.benchmarks.append(BenchmarkComparison(name=name, verdict=Verdict.NEW, unit=cand[name].unit,
                                                  threshold=threshold, candidate_s=median(cand[name].times),
                                                  candidate_trials=len(cand[name].times)))
    order = {v: i for i, v in enumerate(Verdict)}
    cmp.benchmarks.sort(key=lambda b: (order[b.verdict], -(b.ratio if not math.isnan(b.ratio) else 0)))
    cmp.warnings = _side_warnings(baseline, candidate, cmp.benchmarks, threshold)
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
    return runs_frame([read_run(p) for p in paths]), name


def compare_runs(baseline: str | os.PathLike | Sequence[str | os.PathLike],
                 candidate: str | os.PathLike | Sequence[str | os.PathLike], *,
                 threshold: float = DEFAULT_THRESHOLD, alpha: float = DEFAULT_ALPHA,
                 results_dir: str | os.PathLike = DEFAULT_RESULTS_DIR,
                 aa: Sequence[str | os.PathLike] | None = None, allow_missing: bool = False) -> Comparison:
    """Resolve and load each side's runs (files, directories → their newest run, or ids) and
    compare them; ``aa`` optionally names more runs of the baseline's code."""
    base, base_name = _side(baseline, "baseline", results_dir)
    cand, cand_name = _side(candidate, "candidate", results_dir)
    references = [_side(spec, "--aa run", results_dir)[0] for spec in aa or []]
    return compare_frames(base, cand, threshold=threshold, alpha=alpha, baseline_name=base_name,
                          candidate_name=cand_name, aa=references, allow_missing=allow_missing)
