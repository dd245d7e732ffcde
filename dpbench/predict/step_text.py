"""What ``dpbench predict RUN`` prints and writes: per workload, a table of every strategy
configuration × world size (the predicted step with its 95% interval, samples/s, scaling
efficiency, exposed communication, memory per rank, and the run's own measurement with the error
where it has one), the pick at each world size with how sure, and what the predictions rest on;
the same as one JSON document. The report's forecast section renders the same cells and lines
(:func:`prediction_cells`, :func:`basis_lines`).
"""

from __future__ import annotations

from typing import Any

from dpbench.predict.forecast import StepForecast
from dpbench.predict.step import StepPrediction
from dpbench.results.units import fmt_bytes, fmt_pct, fmt_seconds

__all__ = [
    "PICK_LINE",
    "STEP_COLUMNS",
    "basis_lines",
    "by_workload",
    "format_steps",
    "heading",
    "prediction_cells",
    "steps_document",
]


STEP_COLUMNS = (
    "strategy",
    "ranks",
    "step",
    "95% interval",
    "samples/s",
    "efficiency",
    "exposed",
    "memory/rank",
    "measured",
    "error",
)
"""The table's columns, in the order of :func:`prediction_cells`."""


def heading(forecast: StepForecast) -> str:
    """``step time predicted from RUN (weak scaling: per-rank batch as measured)``."""
    kept = "per-rank batch as measured" if forecast.scaling == "weak" else "global batch as measured"
    return f"step time predicted from {forecast.source} ({forecast.scaling} scaling: {kept})"


def basis_lines(forecast: StepForecast) -> list[str]:
    """What the predictions rest on, one line each: the overlap slowdown and its origin, each
    profile's phases, what memory per rank counts, and the notes (the collective model's first)."""
    lines = [f"overlap slowdown {forecast.overlap.value:.2f}: {forecast.overlap.origin}"]
    for p in forecast.profiles:
        lines.append(
            f"from {p.origin}: forward {fmt_seconds(p.forward_s)}, backward {fmt_seconds(p.backward_s)}, "
            f"optimizer {fmt_seconds(p.optimizer_s)} at {p.per_rank_batch} per rank, "
            f"parameters {fmt_bytes(p.param_bytes)}"
            + (f", buffers {fmt_bytes(p.buffer_bytes)} broadcast" if p.broadcasts_buffers and p.buffer_bytes else "")
        )
    lines.append(f"memory/rank: {forecast.memory}")
    return lines + [f"note: {n}" for n in forecast.notes]


def by_workload(forecast: StepForecast) -> list[tuple[str, list[StepPrediction]]]:
    """Per workload (by name), its predictions by world size, then fastest first."""
    return [
        (
            workload,
            sorted(
                (p for p in forecast.predictions if p.workload == workload),
                key=lambda p: (p.world_size, p.step_time_s),
            ),
        )
        for workload in sorted({p.workload for p in forecast.predictions})
    ]


def prediction_cells(p: StepPrediction) -> tuple[str, ...]:
    """One prediction's cells under :data:`STEP_COLUMNS`, its label whole."""
    return (
        p.label,
        str(p.world_size),
        fmt_seconds(p.step_time_s),
        f"[{fmt_seconds(p.lo_s)}, {fmt_seconds(p.hi_s)}]",
        f"{p.samples_per_s:,.0f}",
        fmt_pct(p.scaling_efficiency),
        fmt_seconds(p.exposed_comm_s),
        fmt_bytes(p.memory_per_rank_bytes)
        if p.memory_per_rank_bytes is not None
        else "–",  # the basis line says it was not estimated
        fmt_seconds(p.measured_step_time_s),
        "–" if p.error is None else f"{p.error:+.1%}",
    )


PICK_LINE = "pick (the fastest predicted; sure when no other interval overlaps it):"
"""What the picks are, above them."""

_WIDTHS = (-28, 6, 10, 22, 11, 11, 10, 13, 10, 8)  # negative: left-aligned


def _row(cells: tuple[str, ...]) -> str:
    return "".join(f"{c:<{-w}}" if w < 0 else f"{c:>{w}}" for c, w in zip(cells, _WIDTHS))


def format_steps(forecast: StepForecast) -> str:
    """The forecast as text (see the module doc)."""
    lines = [heading(forecast)] + [f"  {line}" for line in basis_lines(forecast)]
    for workload, predictions in by_workload(forecast):
        lines += ["", workload, _row(STEP_COLUMNS)]
        lines += [_row((cells[0][:27], *cells[1:])) for cells in map(prediction_cells, predictions)]
    lines += ["", PICK_LINE]
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
