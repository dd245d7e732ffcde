"""What ``dpbench predict collectives`` prints and writes: the fitted model (per collective and
tier, the parameters with their intervals and the residual spread), then every prediction with the
measured time and the error beside it where one was measured; and the same as JSON records.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict

from dpbench.predict.collectives import CollectiveModel, CollectivePrediction
from dpbench.predict.model import TierFit

__all__ = ["format_collectives", "json_document", "size_text"]

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
