"""Disturbed trials as the frame reads them: which trials every estimate leaves out.

A run saved by this version says, per trial, whether it was disturbed and whether the session's
re-measurement pass replaced it (``extra_info["trials"]["disturbed"]``, :mod:`dpbench.measure.remeasure`);
a run saved before that is judged here, when it is read, by the same rule
(:func:`dpbench.stats.find_disturbed`: controls against the median control of their placement,
step times against their case's median trial, limits from the run's own spread). Either way the
frame's ``trial_times`` and ``trial_controls`` keep one slot per trial, NaN where a disturbed
trial is left out (:func:`dpbench.stats.left_out`), so trial i still pairs with trial i; the
headline, its interval and every ratio are computed from what remains, and the ratios a suite
saved (scaling efficiency, × DDP) are computed again from the same trials, so that the page and the
gate show one number per quantity whatever version saved the run.
"""

from __future__ import annotations

import json
import math
from typing import Any

from dpbench.stats import (
    TrialSeries,
    coefficient_of_variation,
    disturbance_limits,
    left_out,
    log_t_interval,
    median,
    paired_ratio,
)

__all__ = ["mark_disturbed", "placement"]


def placement(row: dict[str, Any]) -> str:
    """Which ranks, threads and cores a benchmark's trials ran on (a frame row's fields): controls
    compare only within one placement."""
    return json.dumps(
        [
            row.get("device_type"),
            row.get("world_size"),
            row.get("nodes", 1),
            row.get("threads_per_worker"),
            row.get("harness_settings.rank_cores"),
        ],
        default=str,
    )


def _slots(values: Any) -> list[float]:
    """One number per trial, NaN where a results file holds anything but a positive number."""
    if not isinstance(values, list):
        return []
    return [
        float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0 else math.nan
        for v in values
    ]


def _saved(trials: dict[str, Any], count: int) -> tuple[list[str | None], list[bool]] | None:
    """(why, replaced) per trial as the session saved them; None for a run saved without them."""
    flags = trials.get("disturbed")
    if not isinstance(flags, list):
        return None
    flags = (flags + [None] * count)[:count]
    why = [str(f.get("why")) if isinstance(f, dict) else None for f in flags]
    replaced = [bool(f.get("replaced")) if isinstance(f, dict) else False for f in flags]
    return why, replaced


def _case_rows(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        trials = row.get("trials")
        if isinstance(trials, dict) and isinstance(trials.get("step_time_s"), list):
            key = row.get("case_key") if isinstance(row.get("case_key"), str) else f"bench:{row['fullname']}"
            out.setdefault(key, []).append(row)
    return out


def mark_disturbed(rows: list[dict[str, Any]]) -> None:
    """Mark the disturbed trials of one run's rows and leave them out of the rows' readings."""
    cases = _case_rows(rows)
    series = {}
    for key, found in cases.items():
        trials = found[0]["trials"]
        series[key] = TrialSeries(
            placement=placement(found[0]),
            values=tuple(_slots(trials.get("step_time_s"))),
            controls=tuple(_slots(trials.get("control_s"))),
        )
    limits = disturbance_limits(list(series.values())) if series else None
    for row in rows:  # the run's control spread: wide, and the machine was busy throughout
        row["run_control_spread"] = limits.control_spread if limits is not None else math.nan
    for key, found in cases.items():
        case = series[key]
        saved = _saved(found[0]["trials"], len(case.values))
        if saved is None:  # saved before runs said so: judge it now, by the same rule
            why, replaced = [limits.why(case, i) for i in range(len(case.values))], [False] * len(case.values)
        else:
            why, replaced = saved
        out = left_out([w if not r else None for w, r in zip(why, replaced)])
        for row in found:
            _apply(row, case, why, replaced, out)
    _recompute_ratios(rows)


def _apply(row: dict[str, Any], case: TrialSeries, why: list, replaced: list, out: list[bool]) -> None:
    trials = row["trials"]
    flags = trials.get("disturbed") if isinstance(trials.get("disturbed"), list) else []
    listed = []
    for i, reason in enumerate(why):
        if reason is None:
            continue
        measured = flags[i].get("measured") if i < len(flags) and isinstance(flags[i], dict) else None
        measured = measured if isinstance(measured, dict) else {}
        listed.append(
            {
                "trial": i,
                "why": reason,
                "replaced": replaced[i],
                "left_out": out[i],
                # the disturbed trial's own numbers: in its slot unless a re-measurement took it
                "step_time_s": measured.get("step_time_s") if replaced[i] else case.values[i],
                "control_s": measured.get("control_s") if replaced[i] else _at(case.controls, i),
            }
        )
    row["disturbed"] = listed
    row["disturbed_unreplaced"] = sum(1 for d in listed if not d["replaced"])
    if not any(out):
        return
    times = [math.nan if o else v for v, o in zip(case.values, out)]
    controls = [math.nan if _at(out, i) else c for i, c in enumerate(case.controls)]
    kept = [t for t in times if t > 0]
    row["trial_times"], row["trial_controls"], row["trials_count"] = times, controls, len(kept)
    row["trial_cv"] = coefficient_of_variation(kept)
    row["control_median_s"] = median([c for c in controls if c > 0])
    row["control_cv"] = coefficient_of_variation([c for c in controls if c > 0])
    # The headline and its interval from the trials that remain (what the session itself saves).
    row["step_time_s"] = median(kept)
    lo, hi = log_t_interval(kept)
    row["step_time_ci95_lo"], row["step_time_ci95_hi"] = lo, hi
    batch = row.get("global_batch")
    batch = float(batch) if isinstance(batch, (int, float)) and batch > 0 and row.get("kind") == "training" else math.nan
    row["samples_per_s"] = batch / row["step_time_s"]
    row["samples_per_s_ci95_lo"], row["samples_per_s_ci95_hi"] = batch / hi, batch / lo


def _at(values: Any, i: int) -> Any:
    return values[i] if i < len(values) else math.nan


# ---------------------------------------------------------------- ratios a suite saved
def _find(rows: list[dict[str, Any]], **match: Any) -> dict[str, Any] | None:
    for row in rows:
        # the plain case: a reference with options set (a bucket size, a mode) is another case
        plain = not any(str(k).startswith("requested_options.") for k in row)
        if plain and all(row.get(k) == v for k, v in match.items()):
            return row
    return None


def _set(row: dict[str, Any], name: str, ratio: Any) -> None:
    if ratio.pairs < 1:
        return
    row[name] = ratio.ratio
    row[f"{name}_ci95"] = ratio.interval
    row[f"{name}_ci95_lo"], row[f"{name}_ci95_hi"] = ratio.lo, ratio.hi
    row[f"{name}_trials"] = list(ratio.ratios)
    row[f"{name}_confidence"] = ratio.confidence  # the interval's coverage (stats.SHOWN_CONFIDENCE)


def _recompute_ratios(rows: list[dict[str, Any]]) -> None:
    """Scaling efficiency and × DDP from the trials the frame keeps, by the estimator the suites use."""
    for row in rows:
        batch, ws = row.get("global_batch"), row.get("world_size")
        if not isinstance(batch, (int, float)) or not isinstance(ws, (int, float)) or ws < 1:
            continue
        if isinstance(row.get("scaling_efficiency"), (int, float)):
            single = _find(rows, strategy="single", workload=row.get("workload"), world_size=1, suite=row.get("suite"))
            if single is not None and isinstance(single.get("global_batch"), (int, float)):
                # efficiency_i = (batch / t_i) / (N × batch_single / t_single_i), trial i against trial i
                scale = single["global_batch"] * ws / batch
                _set(row, "scaling_efficiency", paired_ratio(single["trial_times"], row["trial_times"]).scaled(1 / scale))
        if isinstance(row.get("relative_to_ddp"), (int, float)):
            ddp = _find(
                rows, strategy="ddp", workload=row.get("workload"), world_size=ws, global_batch=batch, suite=row.get("suite")
            )
            if ddp is not None:
                _set(row, "relative_to_ddp", paired_ratio(row["trial_times"], ddp["trial_times"]))
