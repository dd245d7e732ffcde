"""The report's warnings about the runs themselves: a busy machine, drifting controls, clock
warnings, benchmarks that cannot be compared — and the trial-level notes (disturbed trials, what
became of them), which the report folds into one line per run. The claims are the decision
model's (:mod:`dpbench.decision`), in its words.
"""

from __future__ import annotations

import math

import pandas as pd

from dpbench.stats import busy_run_line, median, positive

__all__ = [
    "DRIFT_THRESHOLD",
    "busy_line",
    "ci_name",
    "disturbed_lines",
    "control_drift",
    "run_warnings",
    "short_window_line",
    "trial_notes",
]

DRIFT_THRESHOLD = 0.10  # controls that move more than this across a run's trial passes are reported


def ci_name(confidence: float) -> str:
    """``CI`` for an interval of at least 95%; below that its own coverage (``88% CI``): runs saved
    before the t-interval (:func:`dpbench.stats.hull_interval`) carry order-statistic intervals of
    fewer than six pairs, which cannot reach 95%."""
    return "CI" if not confidence < 0.95 else f"{confidence:.0%} CI"


# ---------------------------------------------------------------- warnings
def _each_case_once(rows: pd.DataFrame) -> pd.DataFrame:
    """A case published in several suites is one measurement."""
    if "case_key" not in rows:
        return rows
    keyed = rows["case_key"].notna()
    return pd.concat([rows[keyed].drop_duplicates("case_key"), rows[~keyed]])


def control_drift(rows: pd.DataFrame) -> tuple[float, list[float]]:
    """How far a run's controls moved across its trial passes: each case's controls relative to
    its own median, the median of those per trial index, and (max / min − 1) of those medians."""
    rows = _each_case_once(rows)
    passes: dict[int, list[float]] = {}
    for controls in rows["trial_controls"]:
        kept = positive(controls)
        if len(kept) < 2:
            continue
        centre = median(kept)
        for i, c in enumerate(controls):  # by slot: a left-out (NaN) trial keeps its pass's index
            if c > 0:
                passes.setdefault(i, []).append(c / centre)
    medians = [median(passes[i]) for i in sorted(passes)]
    if len(medians) < 2:
        return math.nan, medians
    return max(medians) / min(medians) - 1, medians


def busy_share(rows: pd.DataFrame) -> tuple[int, int, int]:
    """One run's (disturbed trials, trials, of those disturbed: not replaced), each case once."""
    rows = _each_case_once(rows)
    flagged = [d for found in rows["disturbed"] if isinstance(found, list) for d in found]
    total = sum(len(t) for t in rows["trial_times"] if isinstance(t, list))
    return len(flagged), total, sum(1 for d in flagged if not d["replaced"])


def busy_line(run: str, rows: pd.DataFrame) -> str | None:
    """``RUN: the machine was busy during 35% of the trials …: results are unreliable`` — the line the
    session printed (:func:`dpbench.stats.busy_run_line`), from the saved run — else None."""
    from dpbench.decision.contention import others_quiet, run_share

    disturbed, total, unreplaced = busy_share(rows)
    spread = rows["run_control_spread"].iloc[0] if "run_control_spread" in rows and len(rows) else math.nan
    shares = _each_case_once(rows)["foreign_cpu"] if "foreign_cpu" in rows else []
    line = busy_run_line(
        disturbed=disturbed,
        total=total,
        unreplaced=unreplaced,
        control_spread=spread,
        others_quiet=others_quiet(run_share(shares)),
    )
    return f"{run}: {line}" if line else None


def disturbed_lines(run: str, rows: pd.DataFrame) -> list[str]:
    """One line per benchmark with disturbed trials: which, why, and what became of them."""
    out = []
    for _, r in _each_case_once(rows).iterrows():
        found = r["disturbed"] if isinstance(r["disturbed"], list) else []
        for d in found:
            fate = (
                "measured again; the re-measurement replaces it"
                if d["replaced"]
                else (
                    "left out of every estimate (not measured again)"
                    if d["left_out"]
                    else "kept: too few trials remain without it"
                )
            )
            out.append(f"{run} · {r['label']}: trial {d['trial'] + 1} was disturbed ({d['why']}): {fate}")
    return out


def trial_notes(frame: pd.DataFrame) -> list[tuple[str, list[str]]]:
    """Per run with disturbed trials: one line that counts them (``0002_run: 12 of 280 trials were
    disturbed: 9 measured again, 3 left out``) and the per-trial lines behind it. They change no
    claim by themselves (the estimates already hold what remains), so the report folds them."""
    out = []
    for run, rows in frame.groupby("run", sort=False):
        details = disturbed_lines(str(run), rows)
        if not details:
            continue
        disturbed, total, unreplaced = busy_share(rows)
        fates = [f"{disturbed - unreplaced} measured again"] if disturbed - unreplaced else []
        fates += [f"{unreplaced} not measured again"] if unreplaced else []
        out.append((f"{run}: {disturbed} of {total} trials were disturbed: {', '.join(fates)}", details))
    return out


def short_window_line(run: str, row: pd.Series) -> str | None:
    """``RUN · CASE: its GPUs were sampled for 0.41 s in 3 of 5 trials, shorter than the 2.0 s …`` from
    the case's ``sampled_window`` flags; None where every window was long enough or none was judged
    (CPU runs, older runs)."""
    short, windows, needed = (row.get(f"sampled_window.{key}") for key in ("short", "window_s", "needed_s"))
    if not isinstance(short, list) or not any(s is True for s in short) or not isinstance(windows, list):
        return None
    seen = [w for w, s in zip(windows, short) if s is True and _number(w)]
    shortest = f"{min(seen):.2f} s" if seen else "less"
    need = f"the {needed:.1f} s" if _number(needed) else "what"
    return (
        f"{run} · {row['label']}: its GPUs were sampled for {shortest} in {sum(s is True for s in short)} of "
        f"{len(short)} trials, shorter than {need} NVML's readings need (see the sampler's docs): its "
        "utilization and power there mean little, and its energy is absent where it was too short"
    )


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def run_warnings(frame: pd.DataFrame) -> list[str]:
    """Per run: a busy machine first, then drifting controls, the sampler's clock warnings, cases whose
    GPU window was too short for NVML, benchmarks without a per-step time (the per-trial notes are
    :func:`trial_notes`)."""
    out = []
    for run, rows in frame.groupby("run", sort=False):
        busy = busy_line(str(run), rows)
        if busy:
            out.append(busy)
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
        for _, r in _each_case_once(rows).iterrows():
            line = short_window_line(str(run), r)
            if line is not None:
                out.append(line)
        unknown = rows[rows["incomparable"].map(lambda v: isinstance(v, str))]
        for _, r in unknown.iterrows():
            out.append(f"{run} · {r['name']}: {r['incomparable']}; it is shown but never compared")
    return out
