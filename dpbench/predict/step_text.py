"""What ``dpbench predict RUN`` prints and writes: per workload, a table of every strategy
configuration × world size (the predicted step with its 95% interval, samples/s, scaling
efficiency, exposed communication, memory per rank, and the run's own measurement with the error
where it has one), the pick at each world size with how sure, and what the predictions rest on;
the same as one JSON document.
"""

from __future__ import annotations

from typing import Any

from dpbench.predict.forecast import StepForecast
from dpbench.results.units import fmt_bytes, fmt_pct, fmt_seconds

__all__ = ["format_steps", "steps_document"]


def format_steps(forecast: StepForecast) -> str:
    """The forecast as text (see the module doc)."""
    lines = [
        f"step time predicted from {forecast.source} ({forecast.scaling} scaling: "
        + ("per-rank batch as measured)" if forecast.scaling == "weak" else "global batch as measured)"),
        f"  overlap slowdown {forecast.overlap.value:.2f}: {forecast.overlap.origin}",
    ]
    for p in forecast.profiles:
        lines.append(
            f"  from {p.origin}: forward {fmt_seconds(p.forward_s)}, backward {fmt_seconds(p.backward_s)}, "
            f"optimizer {fmt_seconds(p.optimizer_s)} at {p.per_rank_batch} per rank, "
            f"parameters {fmt_bytes(p.param_bytes)}"
            + (f", buffers {fmt_bytes(p.buffer_bytes)} broadcast" if p.broadcasts_buffers and p.buffer_bytes else "")
        )
    lines.append(f"  memory/rank: {forecast.memory}")
    lines += [f"  note: {n}" for n in forecast.notes]
    head = (
        f"{'strategy':<28}{'ranks':>6}{'step':>10}{'95% interval':>22}{'samples/s':>11}{'efficiency':>11}"
        f"{'exposed':>10}{'memory/rank':>13}{'measured':>10}{'error':>8}"
    )
    for workload in sorted({p.workload for p in forecast.predictions}):
        lines += ["", workload, head]
        for p in sorted(
            (p for p in forecast.predictions if p.workload == workload), key=lambda p: (p.world_size, p.step_time_s)
        ):
            interval = f"[{fmt_seconds(p.lo_s)}, {fmt_seconds(p.hi_s)}]"
            error = "–" if p.error is None else f"{p.error:+.1%}"
            memory = fmt_bytes(p.memory_per_rank_bytes) if p.memory_per_rank_bytes is not None else "not estimated"
            lines.append(
                f"{p.label[:27]:<28}{p.world_size:>6}{fmt_seconds(p.step_time_s):>10}{interval:>22}"
                f"{p.samples_per_s:>11,.0f}{fmt_pct(p.scaling_efficiency):>11}{fmt_seconds(p.exposed_comm_s):>10}"
                f"{memory:>13}{fmt_seconds(p.measured_step_time_s):>10}{error:>8}"
            )
    lines += ["", "pick (the fastest predicted; sure when no other interval overlaps it):"]
    lines += [f"  {pick.sentence()}" for pick in forecast.picks]
    return "\n".join(lines) + "\n"


def steps_document(forecast: StepForecast) -> dict[str, Any]:
    """``{"source", "scaling", "overlap_slowdown", "overlap_origin", "notes", "memory", "predictions", "picks"}``:
    one prediction record per workload × configuration × world size."""
    return {
        "source": forecast.source,
        "scaling": forecast.scaling,
        "overlap_slowdown": forecast.overlap.value,
        "overlap_origin": forecast.overlap.origin,
        "notes": list(forecast.notes),
        "memory": forecast.memory,
        "predictions": [
            {
                "workload": p.workload,
                "strategy": p.strategy,
                "label": p.label,
                "world_size": p.world_size,
                "nodes": p.nodes,
                "per_rank_batch": p.per_rank_batch,
                "global_batch": p.global_batch,
                "step_time_s": p.step_time_s,
                "lo_s": p.lo_s,
                "hi_s": p.hi_s,
                "samples_per_s": p.samples_per_s,
                "scaling_efficiency": p.scaling_efficiency,
                "compute_s": p.compute_s,
                "comm_s": p.comm_s,
                "exposed_comm_s": p.exposed_comm_s,
                "memory_per_rank_bytes": p.memory_per_rank_bytes,
                "measured_step_time_s": p.measured_step_time_s,
                "error": p.error,
            }
            for p in forecast.predictions
        ],
        "picks": [
            {
                "workload": k.workload,
                "world_size": k.world_size,
                "label": k.label,
                "sure": k.sure,
                "overlapping": list(k.overlapping),
            }
            for k in forecast.picks
        ],
    }
