"""Tracing a case (opt-in: ``--dpbench-trace`` / ``DPBENCH_TRACE=1``): after the first trial's timed
rounds, control and case metrics, :data:`TRACE_STEPS` more steps run under torch.profiler
(:meth:`dpbench.launcher.Run.trace`), and ``extra_info.trace_breakdown`` is what
:mod:`dpbench.traces.analysis` reads from the per-rank traces, beside the two-pass estimate.

Only the first trial is traced: one trace per case is what a user opens, and tracing every
trial would cost every trial the profiler's start-up and export (measured: docs/validation/traces.md).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from dpbench.traces.analysis import analyse_case, compare_two_pass

__all__ = ["TRACE_STEPS", "TRACE_WARMUP", "TracePath", "trace_env", "trace_trial", "trace_extra_info"]

TRACE_STEPS = 3  # recorded steps per case: enough for a median, small enough to open in a browser
TRACE_WARMUP = 1  # the profiler's warm-up step (its start-up cost stays out of the trace)
TracePath = Callable[[str], tuple[Any, str]]


def trace_env(environ: Any) -> bool:
    """``DPBENCH_TRACE``: "1"/"true"/"yes" on, ""/"0"/"false"/"no" off; anything else a ValueError."""
    raw = str(environ.get("DPBENCH_TRACE", "")).strip().lower()
    if raw in ("", "0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    raise ValueError(f"DPBENCH_TRACE must be 1 or 0 (true/false, yes/no), got {environ.get('DPBENCH_TRACE')!r}")


def trace_trial(run: Any, trace: TracePath, name: str, *, untraced_step_s: float) -> dict[str, Any]:
    """Trace ``run`` into the staged directory for ``name``; what extra_info needs later."""
    staged, relative = trace(name)
    try:
        result = run.trace(TRACE_STEPS, staged, warmup=TRACE_WARMUP)
    except Exception as exc:  # the timed rounds are done and kept: a failed trace costs only the trace
        last = str(exc).strip().splitlines()[-1:] or [""]
        return {"skipped": f"tracing failed: {type(exc).__name__}: {last[0]}"}
    if result.skip_reason is not None:
        return {"skipped": result.skip_reason}
    active = result.active_step_times
    return {
        "staged": [str(f) for f in result.files],
        "files": [f"{relative}/{f.name}" for f in result.files],
        "memory_files": [f"{relative}/{f.name}" for f in result.memory_files],
        "traced_step_s": statistics.median(active),
        "untraced_step_s": untraced_step_s,
    }


def trace_extra_info(traced: dict[str, Any] | None, derived: dict[str, Any]) -> dict[str, Any] | None:
    """``extra_info.trace_breakdown``: the analysis, the overhead and the two-pass figures beside it."""
    if traced is None:
        return None
    if "skipped" in traced:
        return {"skipped": traced["skipped"]}
    breakdown = analyse_case(traced["staged"], names=traced["files"])
    breakdown["memory_files"] = list(traced["memory_files"])
    untraced = traced["untraced_step_s"]
    breakdown["overhead"] = {
        "traced_step_s": traced["traced_step_s"],
        "untraced_step_s": untraced,
        "ratio": traced["traced_step_s"] / untraced if untraced > 0 else None,
    }
    breakdown["two_pass"] = compare_two_pass(
        breakdown, exposed_comm_s=derived.get("exposed_comm_s"), overlap_fraction=derived.get("overlap_fraction")
    )
    return breakdown
