"""What ``dpbench predict`` prints and writes.

- ``dpbench predict collectives``: the fitted model (per collective and tier, the parameters with
  their intervals and the residual spread), then every prediction with the measured time and the
  error beside it where one was measured; and the same as JSON records.
- ``dpbench predict RUN``: per workload, a table of every strategy configuration × world size (the
  predicted step with its 95% interval, samples/s, scaling efficiency, exposed communication,
  memory per rank, and the run's own measurement with the error where it has one), the pick at
  each world size with how sure, and what the predictions rest on; the same as one JSON document.
  The report's forecast section renders the same cells and lines (:func:`prediction_cells`,
  :func:`basis_lines`).
"""

from __future__ import annotations

import statistics
from dataclasses import asdict
from typing import Any

from dpbench.predict.collectives import CollectiveModel, CollectivePrediction
from dpbench.predict.forecast import StepForecast
from dpbench.predict.model import TierFit
from dpbench.predict.step import StepPrediction
from dpbench.results.units import fmt_bytes, fmt_pct, fmt_seconds

__all__ = [
    "PICK_LINE",
    "STEP_COLUMNS",
    "basis_lines",
    "by_workload",
    "compute_line",
    "format_collectives",
    "format_steps",
    "heading",
    "json_document",
    "prediction_cells",
    "size_text",
    "steps_document",
]

_MIB = 1 << 20


def size_text(nbytes: int) -> str:
    """``8 B``, ``4 KiB``, ``1 GiB``: a message size in binary units."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def _interval(value: float, interval: tuple[float, float] | None, unit: str) -> str:
    if interval is None:
        return f"{value:.4g} {unit}"
    return f"{value:.4g} {unit} [{interval[0]:.4g}, {interval[1]:.4g}]"


def _fit_lines(fit: TierFit) -> list[str]:
    spread = f"residual sd {fit.residual_sd:.3f} (log time, ≈{fit.residual_sd:.0%})" if fit.points else ""
    return [
        f"  {fit.collective:<15}{fit.tier:<6} latency {_interval(fit.base_us, fit.base_interval, 'µs')} "
        f"+ {_interval(fit.step_us, fit.step_interval, 'µs')} per hop, "
        f"bus bandwidth {_interval(fit.busbw_gbps, fit.busbw_interval, 'GB/s')}" + (f", {spread}" if spread else ""),
        f"  {'':<21}{fit.origin}",
    ]


def format_collectives(model: CollectiveModel, predictions: list[CollectivePrediction]) -> str:
    """The model, then the predictions as a table, then the median absolute error where measured."""
    lines = [
        "collective model: time = latency + hop latency × hops(n) + bus factor(n) × bytes / bus bandwidth "
        "(95% intervals)",
        f"  {model.gpus_per_node} GPUs per node (from {model.gpus_per_node_origin})",
    ]
    for note in model.notes:
        lines.append(f"  note: {note}")
    for fit in model.tiers:
        lines += _fit_lines(fit)
    lines += [
        "",
        f"{'collective':<15}{'size':>9}{'ranks':>6}{'tier':>6}{'predicted µs':>14}"
        f"{'95% interval':>24}{'measured µs':>13}{'error':>8}",
    ]
    for p in predictions:
        interval = f"[{p.lo_us:.4g}, {p.hi_us:.4g}]"
        measured = "" if p.measured_us is None else f"{p.measured_us:.4g}"
        error = "" if p.error is None else f"{p.error:+.1%}"
        lines.append(
            f"{p.collective:<15}{size_text(p.bytes):>9}{p.world_size:>6}{p.tier:>6}{p.time_us:>14.4g}"
            f"{interval:>24}{measured:>13}{error:>8}"
        )
    summary = _error_summary(predictions)
    if summary:
        lines += ["", *summary]
    return "\n".join(lines) + "\n"


def _error_summary(predictions: list[CollectivePrediction]) -> list[str]:
    """Median absolute error per collective and world size, over the measured sizes ≥ 1 MiB."""
    out = []
    keys = sorted({(p.collective, p.world_size) for p in predictions if p.error is not None})
    for collective, n in keys:
        errors = [
            abs(p.error)
            for p in predictions
            if p.collective == collective and p.world_size == n and p.error is not None and p.bytes >= _MIB
        ]
        if errors:
            out.append(
                f"{collective} at {n} ranks: median absolute error {statistics.median(errors):.1%} "
                f"over {len(errors)} measured sizes ≥ 1 MiB"
            )
    return out


def json_document(model: CollectiveModel, predictions: list[CollectivePrediction]) -> dict:
    """``{"gpus_per_node", "fits": [...], "predictions": [...]}``: one prediction record per
    collective × size × world size with ``bytes``, ``world_size``, ``time_us``, ``lo_us``, ``hi_us``
    (and ``measured_us``, ``error``: null where not measured)."""
    fits = []
    for fit in model.tiers:
        record = asdict(fit)
        for key in ("log_params", "covariance", "dof"):
            record.pop(key)
        fits.append(record)
    return {
        "gpus_per_node": model.gpus_per_node,
        "notes": list(model.notes),
        "fits": fits,
        "predictions": [{**asdict(p), "error": p.error} for p in predictions],
    }


# ---------------------------------------------------------------- dpbench predict RUN
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
    lines += [compute_line(p) for p in _rescaled(forecast)]
    lines.append(f"memory/rank: {forecast.memory}")
    return lines + [f"note: {n}" for n in forecast.notes]


def _rescaled(forecast: StepForecast) -> list[StepPrediction]:
    """One prediction per profile whose compute was scaled to another per-rank batch (strong scaling)."""
    out: dict[tuple[str, str], StepPrediction] = {}
    for profile in forecast.profiles:
        for p in forecast.predictions:
            key = (p.workload, p.label)
            if key == (profile.workload, profile.label) and p.per_rank_batch != profile.per_rank_batch:
                out.setdefault(key, p)
    return list(out.values())


def compute_line(p: StepPrediction) -> str:
    """How forward + backward were scaled to another per-rank batch: the measured floor, or the stated linear."""
    floor = p.compute_floor
    if floor.per_sample_s is None:
        return (
            f"compute of {p.label} on {p.workload} scaled linearly with the per-rank batch: no floor measured "
            f"({floor.origin})"
        )
    batches = ", ".join(map(str, floor.batches))
    return (
        f"compute of {p.label} on {p.workload}: forward + backward {fmt_seconds(floor.floor_s)} + "
        f"{fmt_seconds(floor.per_sample_s)} per sample, fitted on per-rank batches {batches} ({floor.origin})"
    )


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
        _error_cell(p),
    )


def _error_cell(p: StepPrediction) -> str:
    """The error, or why there is none: a measurement whose ranks shared a GPU is no check of the model."""
    if p.error is not None:
        return f"{p.error:+.1%}"
    if p.measured_step_time_s is not None and p.measured_on_shared_device:
        return f"{p.measured_ranks_per_device}/GPU"  # the notes say what sharing a GPU means
    return "–"


PICK_LINE = "pick (the fastest predicted; sure when no other interval overlaps it):"
"""What the picks are, above them."""

_WIDTHS = (6, 10, 22, 11, 11, 10, 13, 10, 8)  # the columns after the label, right-aligned
_LABEL_WIDTH = 28  # the label column at least; as wide as its longest label, which is never cut


def _row(cells: tuple[str, ...], label_width: int = _LABEL_WIDTH) -> str:
    return f"{cells[0]:<{label_width}}" + "".join(f"{c:>{w}}" for c, w in zip(cells[1:], _WIDTHS))


def format_steps(forecast: StepForecast) -> str:
    """The forecast as text (see the module doc)."""
    lines = [heading(forecast)] + [f"  {line}" for line in basis_lines(forecast)]
    for workload, predictions in by_workload(forecast):
        rows = [prediction_cells(p) for p in predictions]
        width = max([_LABEL_WIDTH, *(len(cells[0]) + 1 for cells in rows)])
        lines += ["", workload, _row(STEP_COLUMNS, width)]
        lines += [_row(cells, width) for cells in rows]
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
                "micro_batches": p.micro_batches,
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
                "measured_ranks_per_device": p.measured_ranks_per_device,
                "error": p.error,
                "compute_floor": asdict(p.compute_floor),
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
                "why": k.why,
            }
            for k in forecast.picks
        ],
    }
