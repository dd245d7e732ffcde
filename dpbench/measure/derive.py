"""From the case metrics (measured once per case, see ``Run.case_metrics``) and a step time to the
derived numbers: MFU, tokens/s, exposed communication. Pure: no torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["derive"]


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def derive(case_metrics: Mapping[str, Any], *, step_time_s: float, world_size: int) -> dict[str, Any]:
    """MFU, tokens/s and exposed communication from the case metrics and one step time.

    ``mfu``: (model FLOPs per step ÷ step time) ÷ peak FLOP/s, reported when it lies in (0, 1]
    (a ratio above 1 means the peak is wrong for this machine; ``achieved_flops_per_s`` is still
    there). ``exposed_comm_s``: step time − compute-only step time, clamped at 0.
    ``overlap_fraction``: the share of the step's total collective time hidden behind compute,
    (total − exposed) ÷ total, clamped to [0, 1]. Keys that do not apply are None.
    """
    out: dict[str, Any] = {
        "achieved_flops_per_s": None,
        "mfu": None,
        "tokens_per_s": None,
        "tokens_per_s_per_replica": None,
        "exposed_comm_s": None,
        "overlap_fraction": None,
    }
    if not _positive(step_time_s):
        return out
    flops = case_metrics.get("model_flops_per_step")
    if _positive(flops):
        achieved = flops / step_time_s
        out["achieved_flops_per_s"] = achieved
        peak = case_metrics.get("peak_flops_per_s")
        if _positive(peak) and achieved / peak <= 1.0:
            out["mfu"] = achieved / peak
    tokens = case_metrics.get("tokens_per_step")
    if _positive(tokens):
        out["tokens_per_s"] = tokens / step_time_s
        out["tokens_per_s_per_replica"] = out["tokens_per_s"] / max(1, int(world_size))
    compute = case_metrics.get("compute_only_step_s")
    if _positive(compute):
        exposed = max(0.0, step_time_s - compute)
        out["exposed_comm_s"] = exposed
        total = case_metrics.get("collective_time_s")
        if _positive(total):
            out["overlap_fraction"] = min(1.0, max(0.0, (total - exposed) / total))
    return out
