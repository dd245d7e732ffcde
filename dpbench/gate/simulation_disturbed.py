"""A/A gate jobs with disturbed trials: does a busy minute on the machine make the gate cry wolf?

Each simulated job draws both sides from the gate's noise model (:mod:`dpbench.gate.simulation`),
then disturbs each trial with probability ``rate`` (1 in 50 by default): its step time and its
control are multiplied by a pair drawn from measured disturbances (:func:`measured_disturbances`:
the disturbed trials of a real run, each its control's ratio to its placement's median and its
step time's ratio to its case's median). The gate then judges the job three ways:

- ``raw``: every trial as measured (what the gate judged before disturbed trials were found);
- ``left_out``: disturbed trials found by :func:`dpbench.stats.disturbance_limits` and left out
  (:func:`dpbench.stats.left_out`), none measured again;
- ``remeasured``: as the session does, at most ``REMEASURE_SHARE`` of the trials measured again
  (a further trial of the same session, itself disturbed with the same probability), a clean one
  taking the slot.

A false alarm is a job in which any benchmark is REGRESSED. Used by ``scripts/`` and the tests only.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from dpbench.gate.family import Item, judge_family
from dpbench.gate.judge import Pooled
from dpbench.gate.simulation import TrialNoiseModel, draw_case_params, draw_side
from dpbench.gate.verdicts import Verdict
from dpbench.stats import DisturbanceLimits, TrialSeries, disturbance_limits, left_out

__all__ = ["ARMS", "Disturbance", "aa_false_alarms", "measured_disturbances"]

ARMS = ("raw", "left_out", "remeasured")
REMEASURE_SHARE = 0.2  # as dpbench.measure.remeasure (the gate may not import measure)


@dataclass(frozen=True, kw_only=True)
class Disturbance:
    """What a busy machine did to one trial: factors on its control and on its step time."""

    control: float
    step: float


def measured_disturbances(frame) -> list[Disturbance]:
    """The disturbed trials of the runs in ``frame`` (:func:`dpbench.results.frame.runs_frame`), each
    case once: their control over the median control of the run's trials of that placement, and
    their step time over the median of the case's other trials."""
    out = []
    seen = set()
    for _, row in frame.iterrows():
        key = (row["run_id"], row["case_key"] if isinstance(row["case_key"], str) else row["fullname"])
        found = row["disturbed"] if isinstance(row["disturbed"], list) else []
        if key in seen or not found:
            continue
        seen.add(key)
        others = [t for t in row["trial_times"] if t > 0]
        controls = [c for c in row["trial_controls"] if c > 0]
        for d in found:
            if others and controls and d["step_time_s"] and d["control_s"]:
                out.append(
                    Disturbance(
                        control=d["control_s"] / _median(controls),
                        step=d["step_time_s"] / _median(others),
                    )
                )
    return out


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def _disturb(side: list[Pooled], rng: random.Random, rate: float, found: Sequence[Disturbance], trials: int) -> int:
    """Disturb each trial (planned and spare) with probability ``rate``; returns the planned ones hit."""
    hits = 0
    for pooled in side:
        for times, controls in zip(pooled.runs, pooled.control_runs):
            for i in range(len(times)):
                if rng.random() < rate:
                    d = rng.choice(found)
                    times[i] *= d.step
                    controls[i] *= d.control
                    hits += i < trials
    return hits


def _series(pooled: Pooled, trials: int) -> TrialSeries:
    return TrialSeries(
        placement="one-host", values=tuple(pooled.runs[0][:trials]), controls=tuple(pooled.control_runs[0][:trials])
    )


def _judged(side: list[Pooled], trials: int, arm: str) -> list[Pooled]:
    """One side as the gate pools it under ``arm`` (each pooled side holds one run of ``2 × trials``
    trials: the planned ones first, then the spares a re-measurement draws from)."""
    planned = [_series(p, trials) for p in side]
    if arm == "raw":
        return [_pooled(p, list(s.values), list(s.controls)) for p, s in zip(side, planned)]
    limits = disturbance_limits(planned)
    why = [[limits.why(s, i) for i in range(trials)] for s in planned]
    if arm == "remeasured":
        budget = max(1, math.floor(REMEASURE_SHARE * trials * len(side)))
        for c, (pooled, s) in enumerate(zip(side, planned)):
            values, controls = list(s.values), list(s.controls)
            for i in range(trials):
                if why[c][i] is None or budget <= 0:
                    continue
                budget -= 1
                spare_t, spare_c = pooled.runs[0][trials + i], pooled.control_runs[0][trials + i]
                if _clean_again(limits, s, why[c], i, spare_t, spare_c):
                    values[i], controls[i], why[c][i] = spare_t, spare_c, None
            planned[c] = TrialSeries(placement=s.placement, values=tuple(values), controls=tuple(controls))
    out = []
    for pooled, s, w in zip(side, planned, why):
        drop = left_out(w)
        out.append(
            _pooled(
                pooled,
                [v for v, d in zip(s.values, drop) if not d],
                [c for c, d in zip(s.controls, drop) if not d],
            )
        )
    return out


def _clean_again(limits: DisturbanceLimits, s: TrialSeries, why: list, i: int, value: float, control: float) -> bool:
    clean = [v for j, v in enumerate(s.values) if j != i and why[j] is None]
    again = TrialSeries(placement=s.placement, values=(*clean, value), controls=(*[math.nan] * len(clean), control))
    return limits.why(again, len(clean)) is None


def _pooled(like: Pooled, times: list[float], controls: list[float]) -> Pooled:
    return Pooled(unit=like.unit, runs=[times], control_runs=[controls], case_key=like.case_key)


def aa_false_alarms(
    model: TrialNoiseModel,
    found: Sequence[Disturbance],
    *,
    jobs: int,
    benchmarks: int,
    trials: int,
    rate: float,
    threshold: float,
    alpha: float,
    seed: int = 0,
) -> dict[str, int]:
    """Per arm, how many of ``jobs`` A/A jobs failed (any benchmark REGRESSED); also ``disturbed``:
    the planned trials disturbed over all jobs, and ``jobs``."""
    rng = random.Random(seed)
    failed = dict.fromkeys(ARMS, 0)
    disturbed = 0
    for _ in range(jobs):
        cases = draw_case_params(model, rng, benchmarks)
        sides = [draw_side(model, cases, rng, runs=1, trials=2 * trials) for _ in range(2)]
        for side in sides:
            disturbed += _disturb(side, rng, rate, found, trials)
        for arm in ARMS:
            base, cand = (_judged(side, trials, arm) for side in sides)
            items = [Item(name=f"b{i}", base=b, cand=c) for i, (b, c) in enumerate(zip(base, cand))]
            judged, _ = judge_family(items, threshold=threshold, alpha=alpha)
            failed[arm] += any(b.verdict == Verdict.REGRESSED for b in judged)
    return {**failed, "disturbed": disturbed, "jobs": jobs}
