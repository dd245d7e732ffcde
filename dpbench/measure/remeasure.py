"""Disturbed trials, found and measured again: the session's extra pass after the planned ones.

A trial is disturbed when the machine, not the code, moved it — something else ran on its cores
for those seconds. Every trial times a fixed control in its own workers after its timed rounds
(:mod:`dpbench.launcher.control`), so the control sees a busy machine; where the disturbance ended
before the control ran, the trial's step time still stands out from its case's other trials. Both
rules, and how their limits come from the run's own measured spread, are
:func:`dpbench.stats.disturbance_limits`.

After the planned passes the session judges every trial (:func:`judge`), then measures the
disturbed ones again, each in fresh workers like every trial, at most
:data:`~dpbench.stats.REMEASURE_SHARE` of the planned trials (:func:`plan`): a re-measurement that
is clean takes its slot, and the disturbed trial is kept in the results, marked, under
``measured`` (:func:`settle`); one disturbed again leaves the slot as it was, marked. What no
re-measurement replaced is left out of every estimate while enough trials remain
(:func:`dpbench.stats.left_out`).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dpbench.measure.trials import CaseResult, TrialResult, TrialSession
from dpbench.stats import REMEASURE_SHARE, DisturbanceLimits, TrialSeries, busy_run_line, disturbance_limits

__all__ = ["Remeasured", "busy_line", "judge", "plan", "remeasure", "settle", "snapshot"]


def _series(result: CaseResult) -> TrialSeries:
    return TrialSeries(
        placement=result.trials[0].placement,
        values=tuple(result.measured_values),
        controls=tuple(result.controls),
    )


def judge(results: dict[str, CaseResult]) -> DisturbanceLimits | None:
    """Mark every measured case's disturbed trials (``result.disturbed``) by the limits of this
    run's own spread, and return those limits (None when nothing was measured)."""
    measured = {key: r for key, r in results.items() if r.trials}
    if not measured:
        return None
    series = {key: _series(r) for key, r in measured.items()}
    limits = disturbance_limits(list(series.values()))
    for key, s in series.items():
        whys = [limits.why(s, i) for i in range(len(s.values))]
        measured[key].disturbed = [None if w is None else {"why": w, "replaced": False} for w in whys]
    return limits


def plan(results: dict[str, CaseResult], share: float = REMEASURE_SHARE) -> list[tuple[str, int]]:
    """(case key, trial slot) to measure again, in the order they first ran; at most ``share`` of
    the planned trials (at least one). Failed cases are not tried again."""
    total = sum(len(r.trials) for r in results.values())
    todo = [
        (key, i)
        for key, r in results.items()
        if r.error is None and r.skip_reason is None
        for i, flag in enumerate(r.disturbed)
        if flag is not None
    ]
    todo.sort(key=lambda ki: results[ki[0]].trials[ki[1]].order)
    return todo[: max(1, math.floor(share * total))] if todo else []


def snapshot(trial: TrialResult) -> dict[str, Any]:
    """A trial's own numbers, as the results keep a disturbed (or a rejected re-measured) one."""
    return {
        "step_time_s": trial.value,
        "control_s": trial.control_s,
        "round_times_s": list(trial.round_times),
        "order": trial.order,
        "started_at": trial.started_at,
        "timeline": trial.timeline,
    }


def settle(result: CaseResult, slot: int, measured: TrialResult, limits: DisturbanceLimits) -> bool:
    """Judge the re-measurement of ``slot`` by the run's limits (its control against its placement's
    median, its step time against the case's clean trials); clean, it takes the slot and the
    disturbed trial moves under ``measured``. Returns whether it replaced the trial."""
    clean = [t.value for j, t in enumerate(result.trials) if j != slot and result.disturbed[j] is None]
    series = TrialSeries(
        placement=measured.placement,
        values=(*clean, measured.value),
        controls=(*[math.nan] * len(clean), measured.control_s),
    )
    again = limits.why(series, len(clean))
    flag = result.disturbed[slot]
    if again is not None:
        flag["remeasured"] = {"why": again, **snapshot(measured)}
        return False
    flag["replaced"] = True
    flag["measured"] = snapshot(result.trials[slot])
    result.trials[slot] = measured
    return True


def busy_line(
    results: dict[str, CaseResult], share: float = REMEASURE_SHARE, limits: DisturbanceLimits | None = None
) -> str | None:
    """The run's first line (:func:`dpbench.stats.busy_run_line`) where more than ``share`` of its
    trials were disturbed, or its controls spread so wide that the machine was busy throughout;
    else None."""
    from dpbench.decision.contention import foreign_cpu, others_quiet, run_share

    flags = [f for r in results.values() for f in r.disturbed if f is not None]
    cores = os.cpu_count()  # what the run's machine_info records, and the saved run's reading uses
    shares = [foreign_cpu({"sampler": [t.sampler for t in r.trials]}, cores) for r in results.values()]
    return busy_run_line(
        disturbed=len(flags),
        total=sum(len(r.trials) for r in results.values()),
        unreplaced=sum(1 for f in flags if not f.get("replaced")),
        control_spread=limits.control_spread if limits is not None else math.nan,
        share=share,
        others_quiet=others_quiet(run_share(shares)),
    )


@dataclass(frozen=True, kw_only=True)
class Remeasured:
    """What the extra pass did (saved in the run's ``machine_info["dpbench"]["remeasure"]``)."""

    trials: int  # planned trials judged
    disturbed: int  # of those, disturbed
    measured_again: int  # re-measured (at most REMEASURE_SHARE of the planned trials)
    replaced: int  # re-measurements that were clean and took their slot
    seconds: float  # the extra pass's wall time
    busy: str | None  # the run's first line when the machine was busy, else None

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def remeasure(
    session: TrialSession,
    *,
    share: float = REMEASURE_SHARE,
    between_passes: Callable[[], Any] | None = None,
    progress: Callable[[str], None] = lambda text: None,
) -> Remeasured:
    """Judge every trial of ``session``, then measure the disturbed ones again (one bounded pass).
    KeyboardInterrupt propagates; a re-measurement that fails leaves its slot as it was, marked."""
    started = time.monotonic()
    results = session.results
    limits = judge(results)
    todo = plan(results, share) if limits is not None else []
    if todo:
        progress(f"measuring again {len(todo)} disturbed trial(s) of {sum(len(r.trials) for r in results.values())}")
        if between_passes is not None:
            between_passes()  # as before every pass: no workers run here
    order = max((t.order for r in results.values() for t in r.trials), default=-1) + 1
    replaced = 0
    for key, slot in todo:
        try:
            measured = session.measure_again(key, slot, order)
        except Exception as exc:  # the planned trial stands, marked; the case's test is not failed by it
            results[key].disturbed[slot]["remeasured"] = {"why": f"failed: {type(exc).__name__}: {exc}"}
        else:
            replaced += settle(results[key], slot, measured, limits)
        order += 1
    flags = [f for r in results.values() for f in r.disturbed if f is not None]
    return Remeasured(
        trials=sum(len(r.trials) for r in results.values()),
        disturbed=len(flags),
        measured_again=len(todo),
        replaced=replaced,
        seconds=time.monotonic() - started,
        busy=busy_line(results, share, limits),
    )
