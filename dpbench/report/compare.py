"""The regression gate: compare a candidate run against a baseline, benchmark by benchmark.

A benchmark *regressed* when its median step time grew by more than ``threshold`` **and**
that slowdown beyond the threshold is statistically significant: a one-sided Mann-Whitney U
test of the candidate's raw per-round samples against the baseline's scaled by
``1 + threshold`` (p < ``alpha``), or, where a run was saved without raw samples,
non-overlapping ~95% confidence intervals of the two medians. The threshold ignores real but
unimportant changes; the test ignores noise that happens to cross the threshold.
"""
from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field
from typing import Any

import pandas as pd

from dpbench.report.load import DEFAULT_RESULTS_DIR, ResultsError, read_run, resolve_run, runs_frame
from dpbench.report.stats import mann_whitney_u, median_ci
from dpbench.report.units import fmt_ratio, fmt_seconds

__all__ = [
    "BenchmarkComparison",
    "Comparison",
    "compare_frames",
    "compare_runs",
    "display_names",
    "machine_mismatches",
    "parse_threshold",
    "to_github_action_benchmark",
    "to_json",
    "to_markdown",
    "to_text",
]

REGRESSED, IMPROVED, UNCHANGED = "regressed", "improved", "unchanged"
ONLY_BASELINE, ONLY_CANDIDATE = "only in baseline", "only in candidate"
# Fields of the machine that change benchmark numbers on their own (machine.* columns).
MACHINE_FIELDS = ("gpu", "gpu_count", "driver", "cuda", "torch", "cpu")


@dataclass
class BenchmarkComparison:
    name: str
    status: str
    baseline_median_s: float = math.nan  # seconds per step
    candidate_median_s: float = math.nan
    ratio: float = math.nan  # candidate / baseline: > 1 is slower
    p_value: float = math.nan
    test: str = ""
    note: str = ""
    baseline_rounds: int = 0
    candidate_rounds: int = 0


@dataclass
class Comparison:
    baseline: str
    candidate: str
    threshold: float
    alpha: float
    warnings: list[str] = field(default_factory=list)
    benchmarks: list[BenchmarkComparison] = field(default_factory=list)

    @property
    def regressions(self) -> list[BenchmarkComparison]:
        return [b for b in self.benchmarks if b.status == REGRESSED]

    @property
    def exit_code(self) -> int:
        return 1 if self.regressions else 0


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
        raise ResultsError(f"--threshold: expected a percentage like 5% or a fraction like 0.05, found {text!r}")
    return value


def machine_mismatches(baseline: dict[str, Any], candidate: dict[str, Any]) -> list[str]:
    """One line per machine field that differs (``machine.*`` values of the two runs)."""
    out = []
    for key in MACHINE_FIELDS:
        b, c = baseline.get(key), candidate.get(key)
        if _missing(b) and _missing(c):
            continue
        if str(b) != str(c):
            out.append(f"{key}: baseline {b if not _missing(b) else 'unknown'}, candidate {c if not _missing(c) else 'unknown'}")
    return out


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _min_p(n_x: int, n_y: int) -> float:
    """The smallest one-sided p-value the exact test can reach with these sample sizes."""
    return 1 / math.comb(n_x + n_y, n_x)


def _compare_one(name: str, base: pd.Series, cand: pd.Series, threshold: float, alpha: float) -> BenchmarkComparison:
    out = BenchmarkComparison(name=name, status=UNCHANGED,
                              baseline_median_s=float(base["step_time_median"]),
                              candidate_median_s=float(cand["step_time_median"]),
                              baseline_rounds=int(base["stats.rounds"]), candidate_rounds=int(cand["stats.rounds"]))
    if not out.baseline_median_s > 0:
        out.note = "baseline median is not positive; no ratio"
        return out
    out.ratio = out.candidate_median_s / out.baseline_median_s
    slower = out.ratio > 1 + threshold
    faster = out.ratio < 1 - threshold
    xs, ys = cand["step_samples"], base["step_samples"]
    if isinstance(xs, list) and isinstance(ys, list) and len(xs) >= 2 and len(ys) >= 2:
        # Test against the baseline moved to the threshold: "slower by more than 5%" must be
        # significant, not merely "slower". A plain candidate-vs-baseline test flags the 3-sigma
        # noise that crosses the threshold in roughly one run in forty per dozen benchmarks.
        if out.ratio >= 1:
            result = mann_whitney_u(xs, [v * (1 + threshold) for v in ys], alternative="greater")
        else:
            result = mann_whitney_u(xs, [v * (1 - threshold) for v in ys], alternative="less")
        out.p_value = result.p_value
        out.test = f"mann-whitney ({result.method})"
        significant = result.p_value < alpha
        if (slower or faster) and not significant and _min_p(len(xs), len(ys)) >= alpha:
            out.note = f"too few rounds ({len(ys)} vs {len(xs)}) for the test to reach p < {alpha:g}"
    else:
        # No raw samples (saved without --benchmark-save-data): compare the medians' CIs.
        b_steps, c_steps = base["stats.median"] / base["step_time_median"], cand["stats.median"] / cand["step_time_median"]
        b_lo, b_hi = median_ci(out.baseline_median_s, base["stats.iqr"] / b_steps, max(1, out.baseline_rounds))
        c_lo, c_hi = median_ci(out.candidate_median_s, cand["stats.iqr"] / c_steps, max(1, out.candidate_rounds))
        significant = c_lo > b_hi or c_hi < b_lo
        out.test = "ci-overlap"
    if slower and significant:
        out.status = REGRESSED
    elif faster and significant:
        out.status = IMPROVED
    return out


def compare_frames(baseline: pd.DataFrame, candidate: pd.DataFrame, *, threshold: float = 0.05,
                   alpha: float = 0.05, baseline_name: str = "baseline",
                   candidate_name: str = "candidate", aa: list[pd.DataFrame] | None = None) -> Comparison:
    """Compare two runs' frames (each from :func:`dpbench.report.load_runs`, one run each).

    ``aa``: more runs of the baseline's code (A/A references). Rounds inside one run cannot
    show how much a whole case moves between runs; repeated runs can. Each benchmark's
    threshold becomes at least the largest change between the baseline and an A/A run.
    """
    if not 0 < alpha < 1:
        raise ResultsError(f"--alpha: expected a probability between 0 and 1, found {alpha!r}")
    sides = [("baseline", baseline), ("candidate", candidate)] + [("--aa run", frame) for frame in aa or []]
    for what, frame in sides:
        if frame.empty or frame["run_id"].nunique() != 1:
            raise ResultsError(f"{what}: expected the benchmarks of one run, found {frame['run_id'].nunique()} runs")
    cmp = Comparison(baseline=baseline_name, candidate=candidate_name, threshold=threshold, alpha=alpha)
    b_machine = {k: baseline[f"machine.{k}"].iloc[0] for k in MACHINE_FIELDS}
    c_machine = {k: candidate[f"machine.{k}"].iloc[0] for k in MACHINE_FIELDS}
    cmp.warnings = [f"machines differ: {m}" for m in machine_mismatches(b_machine, c_machine)]
    b_profiles, c_profiles = set(baseline["profile"].dropna()), set(candidate["profile"].dropna())
    if b_profiles and c_profiles and b_profiles != c_profiles:
        cmp.warnings.append(f"profiles differ: baseline {sorted(b_profiles)}, candidate {sorted(c_profiles)}")
    base = baseline.drop_duplicates("fullname", keep="last").set_index("fullname")
    cand = candidate.drop_duplicates("fullname", keep="last").set_index("fullname")
    common = [n for n in base.index if n in cand.index]
    if not common:
        raise ResultsError(
            f"{baseline_name} and {candidate_name} have no benchmark in common "
            f"({len(base)} vs {len(cand)} benchmarks): nothing to compare"
        )
    spread: dict[str, float] = {}
    for frame in aa or []:
        for name, change in _aa_spread(base, frame).items():
            spread[name] = max(spread.get(name, 0.0), change)
    for name in common:
        own = max(threshold, spread.get(name, 0.0))
        result = _compare_one(name, base.loc[name], cand.loc[name], own, alpha)
        if own > threshold:
            result.note = "; ".join(filter(None, [result.note, f"threshold {own:.1%} from the A/A run"]))
        cmp.benchmarks.append(result)
    for name in base.index.difference(cand.index, sort=False):
        cmp.benchmarks.append(BenchmarkComparison(name=name, status=ONLY_BASELINE,
                                                  baseline_median_s=float(base.loc[name, "step_time_median"])))
    for name in cand.index.difference(base.index, sort=False):
        cmp.benchmarks.append(BenchmarkComparison(name=name, status=ONLY_CANDIDATE,
                                                  candidate_median_s=float(cand.loc[name, "step_time_median"]),
                                                  candidate_rounds=int(cand.loc[name, "stats.rounds"])))
    order = {REGRESSED: 0, IMPROVED: 1, UNCHANGED: 2, ONLY_BASELINE: 3, ONLY_CANDIDATE: 4}
    cmp.benchmarks.sort(key=lambda b: (order[b.status], -(b.ratio if not math.isnan(b.ratio) else 0)))
    return cmp


def _aa_spread(base: pd.DataFrame, aa: pd.DataFrame) -> dict[str, float]:
    """Per benchmark, |median of the A/A run / median of the baseline − 1|."""
    other = aa.drop_duplicates("fullname", keep="last").set_index("fullname")
    spread = {}
    for name in base.index.intersection(other.index):
        b, a = float(base.loc[name, "step_time_median"]), float(other.loc[name, "step_time_median"])
        if b > 0 and a > 0:
            spread[name] = abs(a / b - 1)
    return spread


def compare_runs(baseline: str | os.PathLike, candidate: str | os.PathLike, *, threshold: float = 0.05,
                 alpha: float = 0.05, results_dir: str | os.PathLike = DEFAULT_RESULTS_DIR,
                 aa: list[str | os.PathLike] | None = None) -> Comparison:
    """Resolve and load two runs (file, directory → its newest run, or id) and compare them;
    ``aa`` optionally names more runs of the baseline's code (see :func:`compare_frames`)."""
    paths = [resolve_run(spec, results_dir=results_dir) for spec in (baseline, candidate, *(aa or []))]
    frames = [runs_frame([read_run(p)]) for p in paths]
    return compare_frames(frames[0], frames[1], threshold=threshold, alpha=alpha,
                          baseline_name=str(paths[0]), candidate_name=str(paths[1]), aa=frames[2:])


# ---------------------------------------------------------------- output formats
def _p(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:.2g}"


def display_names(names: list[str]) -> dict[str, str]:
    """Full pytest names → the test id alone (``test_x[case]``) wherever that stays unique."""
    short = {n: n.rsplit("::", 1)[-1] for n in names}
    counts: dict[str, int] = {}
    for s in short.values():
        counts[s] = counts.get(s, 0) + 1
    return {n: (s if counts[s] == 1 else n) for n, s in short.items()}


def _rows(cmp: Comparison) -> list[list[str]]:
    names = display_names([b.name for b in cmp.benchmarks])
    return [[names[b.name], fmt_seconds(b.baseline_median_s), fmt_seconds(b.candidate_median_s), fmt_ratio(b.ratio),
             _p(b.p_value), b.status.upper() if b.status == REGRESSED else b.status] for b in cmp.benchmarks]


HEADER = ["benchmark", "baseline /step", "candidate /step", "change", "p", "status"]


def _verdict(cmp: Comparison) -> str:
    n = len(cmp.regressions)
    rule = f"slower by > {cmp.threshold:.1%} with p < {cmp.alpha:g}"
    if n:
        short = display_names([b.name for b in cmp.benchmarks])
        names = ", ".join(short[b.name] for b in cmp.regressions)
        return f"{n} regression{'s' if n > 1 else ''} ({rule}): {names}"
    return f"no regressions ({rule}) in {sum(b.status in (REGRESSED, IMPROVED, UNCHANGED) for b in cmp.benchmarks)} compared benchmarks"


def to_text(cmp: Comparison) -> str:
    """A plain-text table for the terminal, verdict last."""
    rows = [HEADER] + _rows(cmp)
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    lines = [f"baseline:  {cmp.baseline}", f"candidate: {cmp.candidate}", ""]
    for i, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    notes = [f"note: {b.name}: {b.note}" for b in cmp.benchmarks if b.note]
    return "\n".join(lines + [""] + notes + [_verdict(cmp)]) + "\n"


def _md(text: str) -> str:
    """Escape a string from a results file for a Markdown table cell (no HTML, no markup)."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    for ch in "\\`*_[]|#":
        text = text.replace(ch, "\\" + ch)
    return text.replace("\n", " ")


def to_markdown(cmp: Comparison) -> str:
    """A summary for a pull-request comment."""
    icon = "❌" if cmp.regressions else "✅"
    lines = ["## dpbench compare", "", f"{icon} **{_md(_verdict(cmp))}**", ""]
    lines += [f"> ⚠️ {_md(w)}" for w in cmp.warnings] + ([""] if cmp.warnings else [])
    lines += [f"Baseline {_md(cmp.baseline)} → candidate {_md(cmp.candidate)}", ""]
    lines += ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(_md(c) for c in row) + " |" for row in _rows(cmp)]
    return "\n".join(lines) + "\n"


def to_json(cmp: Comparison) -> dict[str, Any]:
    def clean(value: Any) -> Any:  # JSON has no NaN
        return None if isinstance(value, float) and math.isnan(value) else value

    return {
        "baseline": cmp.baseline, "candidate": cmp.candidate, "threshold": cmp.threshold, "alpha": cmp.alpha,
        "warnings": cmp.warnings, "regressions": [b.name for b in cmp.regressions], "exit_code": cmp.exit_code,
        "benchmarks": [{k: clean(v) for k, v in asdict(b).items()} for b in cmp.benchmarks],
    }


def to_github_action_benchmark(cmp: Comparison) -> list[dict[str, Any]]:
    """The candidate's numbers in github-action-benchmark's ``customSmallerIsBetter`` format."""
    out = []
    for b in cmp.benchmarks:
        if b.status == ONLY_BASELINE or math.isnan(b.candidate_median_s):
            continue
        extra = f"status: {b.status}; change vs baseline: {fmt_ratio(b.ratio)}; p: {_p(b.p_value)}"
        out.append({"name": b.name, "unit": "s/step", "value": b.candidate_median_s,
                    "extra": f"{extra}; rounds: {b.candidate_rounds}"})
    return out
