"""The report's claims in words, and its warnings — claiming only what the trials support.

Each configuration is compared with ``single`` of the same run and workload at the same global
batch through its throughput, trial i against trial i (:func:`dpbench.report.configs.vs_single`):
trials are interleaved across the session, so trial i of both cases ran close in time and the
pairing cancels what the machine did between passes. The ratio is the geometric mean of the
paired ratios with a 95% t-interval on their logs; an interval that contains 1 is "no
significant difference".
"""

from __future__ import annotations

import math

import pandas as pd

from dpbench.report.configs import vs_single
from dpbench.results.units import fmt_num
from dpbench.stats import PairedRatio, median, positive

__all__ = ["DRIFT_THRESHOLD", "control_drift", "fastest_line", "run_warnings", "sentence"]

DRIFT_THRESHOLD = 0.10  # controls that move more than this across a run's trial passes are reported


def sentence(case: pd.Series, single: pd.Series, ratio: PairedRatio | None = None) -> str:
    """``"ddp w2 is 1.31× single (CI 1.22–1.40, 4 paired trials)"``, or why no such claim can be
    made. ``case`` and ``single`` are rows of :func:`dpbench.report.configs.configurations`;
    ``ratio``: their :func:`~dpbench.report.configs.vs_single`, where already computed."""
    name = str(case["case"])
    ratio = vs_single(case, single) if ratio is None else ratio
    if ratio.pairs < 2:
        return (
            f"{name} is {ratio.ratio:.2f}× single (fewer than 2 trials each: the spread across processes is "
            "unknown, so this is not a claim)"
        )
    interval = f"CI {ratio.lo:.2f}–{ratio.hi:.2f}, {ratio.pairs} paired trials"
    if not ratio.significant:
        return f"no significant difference between {name} and single ({ratio.ratio:.2f}×, {interval})"
    return f"{name} is {ratio.ratio:.2f}× single ({interval})"


def fastest_line(rows: pd.DataFrame) -> str:
    best = rows.loc[pd.to_numeric(rows["samples_per_s"], errors="coerce").idxmax()]
    lo, hi = best["samples_per_s_ci95_lo"], best["samples_per_s_ci95_hi"]
    ci = "" if math.isnan(lo) else f" (CI {fmt_num(lo)}–{fmt_num(hi)})"
    return f"fastest: {best['case']} at {fmt_num(best['samples_per_s'])} samples/s{ci}"


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
            out.append(
                f"{run}: the controls drifted {drift:.0%} across the trial passes (per pass, each case's "
                f"control relative to its own median: {listed}): the machine's speed changed during the "
                "run, so trials of different passes ran on a different machine"
            )
        for _, r in rows.iterrows():
            for warning in r["clock_warnings"]:
                out.append(f"{run} · {r['label']} ({r['name']}): {warning}")
        unknown = rows[rows["incomparable"].map(lambda v: isinstance(v, str))]
        for _, r in unknown.iterrows():
            out.append(f"{run} · {r['name']}: {r['incomparable']}; it is shown but never compared")
    return out
