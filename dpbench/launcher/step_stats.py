"""StepStats: what ``Run.step(k)`` returns — measured where the work runs."""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["StepStats", "percentile"]


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (``q`` in [0, 100]) of a non-empty list."""
    if not values:
        raise ValueError("percentile of an empty list")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass(kw_only=True)
class StepStats:
    """Per-step measurements of ``k`` synchronised training steps.

    ``step_times`` are wall seconds per step, taken after device synchronisation on each
    rank and reduced with max over ranks (the slowest rank sets the pace). ``phases`` maps a
    :class:`dpbench.schema.Phase` value to mean seconds per step. ``peak_memory_bytes`` maps
    a device label (``"cuda:0"``, ``"cpu:rank0"``, …) to its peak (``max_memory_allocated``
    on CUDA, process RSS on CPU). ``losses`` is the global-batch loss of each step.
    """

    step_times: list[float]
    global_batch: int
    losses: list[float] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)
    peak_memory_bytes: dict[str, int] = field(default_factory=dict)

    @property
    def steps(self) -> int:
        return len(self.step_times)

    @property
    def total_time(self) -> float:
        return float(sum(self.step_times))

    @property
    def samples_per_s(self) -> float:
        total = self.total_time
        return self.global_batch * self.steps / total if total > 0 else float("nan")

    @property
    def step_time_p50(self) -> float:
        return statistics.median(self.step_times)

    @property
    def step_time_p95(self) -> float:
        return percentile(self.step_times, 95)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(
            samples_per_s=self.samples_per_s,
            step_time_p50=self.step_time_p50,
            step_time_p95=self.step_time_p95,
        )
        return out
