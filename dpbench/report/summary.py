"""The report's summary in words, and its warnings — claiming only what the trials support.

Each case is compared with ``single`` of the same run, suite and workload through its
throughput, trial i against trial i: trials are interleaved across the session, so trial i of
both cases ran close in time and the pairing cancels what the machine did between passes.
The ratio is the geometric mean of the paired ratios with a 95% t-interval on their logs; an
interval that contains 1 is "no significant difference".
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from dpbench.stats import median, paired_ratio, positive
from dpbench.results.units import fmt_num

__all__ = ["DRIFT_THRESHOLD", "SummaryBlock", "control_drift", "run_warnings", "sentence", "summarize"]

DRIFT_THRESHOLD = 0.10  # controls that move more than this across a run's trial passes are reported
SINGLE = "single"


@dataclass(kw_only=True)
class SummaryBlock:
    run: str
    suite: str
    workload: str
    lines: list[str] = field(default_factory=list)


def _throughputs(row: pd.Series) -> list[float]:
    """Samples/s of each trial: global batch / that trial's step time."""
    batch = _batch(row)
    return [batch / t for t in positive(row["trial_times"])] if batch > 0 else []


def _short(row: pd.Series) -> str:
    """The case's label without the ``[suite]`` that tells suites apart across the whole report."""
    return str(row["label"]).removesuffix(f" [{row['suite']}]")


def sentence(case: pd.Series, single: pd.Series) -> str:
    """``"ddp w2 is 1.31× single (CI 1.22–1.40)"``, or why no such claim can be made."""
    name = _short(case)
    ratio = paired_ratio(_throughputs(case), _throughputs(single))
    if ratio.pairs < 2:
        plain = case["samples_per_s"] / single["samples_per_s"]
        return (f"{name} is {plain:.2f}× single (fewer than 2 trials each: the spread across processes is "
                "unknown, so this is not a claim)")
    interval = f"CI {ratio.lo:.2f}–{ratio.hi:.2f}, {ratio.pairs} paired trials"
    if not ratio.significant:
        return f"no significant difference between {name} and single ({ratio.ratio:.2f}×, {interval})"
    return f"{name} is {ratio.ratio:.2f}× single ({interval})"


def _fastest(rows: pd.DataFrame) -> str:
    best = rows.loc[rows["samples_per_s"].idxmax()]
    lo, hi = best["samples_per_s_ci95_lo"], best["samples_per_s_ci95_hi"]
    ci = "" if math.isnan(lo) else f" (CI {fmt_num(lo)}–{fmt_num(hi)})"
    return f"fastest: {_short(best)} at {fmt_num(best['samples_per_s'])} samples/s{ci}"


def _batch(row: pd.Series) -> float:
    return float(row["samples_per_s"]) * float(row["step_time_s"])  # the global batch, as the frame read it


def _single_for(group: pd.DataFrame, singles: pd.DataFrame) -> tuple[pd.Series | None, str]:
    """The single case to compare a suite's cases with: the suite's own, else the same run's
    single of this workload at the same global batch from another suite (trials are interleaved
    across the whole session, so trial i of both still ran close in time)."""
    own = singles[singles["suite"].fillna("") == group["suite"].fillna("").iloc[0]]
    if not own.empty:
        return own.iloc[0], ""
    batches = {round(_batch(r)) for _, r in group.iterrows()}
    elsewhere = singles[[round(_batch(r)) in batches for _, r in singles.iterrows()]]
    if not elsewhere.empty:
        return elsewhere.iloc[0], f"single from the {elsewhere.iloc[0]['suite']} suite of this run"
    return None, ""


def summarize(frame: pd.DataFrame) -> list[SummaryBlock]:
    """Per run, suite and workload: the fastest case, then every case against single."""
    rows = frame[(frame["kind"].fillna("training") != "collective") & frame["workload"].notna()]
    rows = rows[pd.to_numeric(rows["samples_per_s"], errors="coerce") > 0]
    blocks = []
    for (run, suite, workload), group in rows.groupby(["run", rows["suite"].fillna(""), "workload"], sort=False):
        block = SummaryBlock(run=str(run), suite=str(suite), workload=str(workload), lines=[_fastest(group)])
        singles = rows[(rows["run"] == run) & (rows["workload"] == workload) & (rows["strategy"] == SINGLE)]
        others = group[group["strategy"] != SINGLE]
        single, source = _single_for(group, singles)
        if single is None:
            if not others.empty:
                block.lines.append(f"no single case of workload {workload} at this batch in this run: "
                                   "nothing to compare against")
        else:
            if source and not others.empty:
                block.lines.append(f"compared with {source}")
            ordered = others.assign(_r=others["samples_per_s"] / single["samples_per_s"]).sort_values(
                "_r", ascending=False)
            block.lines += [sentence(case, single) for _, case in ordered.iterrows()]
        blocks.append(block)
    return blocks


# ---------------------------------------------------------------- warnings
def control_drift(rows: pd.DataFrame) -> tuple[float, list[float]]:
    """How far a run's controls moved across its trial passes: each case's controls relative to
    its own median, the median of those per trial index, and (max / min − 1) of those medians."""
    if "case_key" in rows:  # a case published in several suites is one measurement
        keyed = rows["case_key"].notna()
        rows = pd.concat([rows[keyed].drop_duplicates("case_key"), rows[~keyed]])
    passes: dict[int, list[float]] = {}
    for controls in rows["trial_controls"]:
        controls = positive(controls)
        if len(controls) < 2:
            continue
        centre = median(controls)
        for i, c in enumerate(controls):
            passes.setdefault(i, []).append(c / centre)
    medians = [median(passes[i]) for i in sorted(passes)]
    if len(medians) < 2:
        return math.nan, medians
    return max(medians) / min(medians) - 1, medians


def run_warnings(frame: pd.DataFrame) -> list[str]:
    """Per run: drifting controls, the sampler's clock warnings, benchmarks without a per-step time."""
    out = []
    for run, rows in frame.groupby("run", sort=False):
        drift, medians = control_drift(rows)
        if drift > DRIFT_THRESHOLD:
            listed = ", ".join(f"{m:.2f}" for m in medians)
            out.append(f"{run}: the controls drifted {drift:.0%} across the trial passes (per pass, each case's "
                       f"control relative to its own median: {listed}): the machine's speed changed during the "
                       "run, so trials of different passes ran on a different machine")
        for _, r in rows.iterrows():
            for warning in r["clock_warnings"]:
                out.append(f"{run} · {r['label']} ({r['name']}): {warning}")
        unknown = rows[rows["incomparable"].map(lambda v: isinstance(v, str))]
        for _, r in unknown.iterrows():
            out.append(f"{run} · {r['name']}: {r['incomparable']}; it is shown but never compared")
    return out
