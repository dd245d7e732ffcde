"""StepStats: what ``Run.step(k)`` returns — measured where the work runs."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from dpbench.stats import percentile

__all__ = ["StepStats", "merge_step_stats"]


@dataclass(kw_only=True)
class StepStats:
    """Per-step measurements of ``k`` synchronised training steps.

    ``step_times`` are wall seconds per step, taken after device synchronisation on each
    rank and reduced with max over ranks (the slowest rank sets the pace). ``phases`` maps a
    :class:`dpbench.schema.Phase` value to mean seconds per step. ``peak_memory_bytes`` maps
    a device label (``"cuda:0"``, ``"cpu:rank0"``, …) to its peak (``max_memory_allocated``
    on CUDA, process RSS on CPU). ``losses`` is the global-batch loss of each step.
    ``skipped_steps``: the steps (0-based, within these ``k``) whose optimizer update a loss scaler
    skipped on any rank (fp16 gradients with inf or NaN).
    ``minor_faults``: minor page faults over the ``k`` steps, summed over ranks (whole worker
    processes, read before the first step and after the last, outside the clocks). Memory that
    the C library returns to the OS and the next step touches again costs one per page: glibc's
    heap trimming, whose share depends on the allocation order and on the process, can make the same
    ``single`` step slower in some worker processes than in others (measurements:
    docs/calibration.md#page-faults), so a trial that is slower than its siblings with many more
    faults per step is the allocator, not the code.
    """

    step_times: list[float]
    global_batch: int
    losses: list[float] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)
    peak_memory_bytes: dict[str, int] = field(default_factory=dict)
    minor_faults: int = 0
    skipped_steps: list[int] = field(default_factory=list)

    @property
    def steps(self) -> int:
        return len(self.step_times)

    @property
    def minor_faults_per_step(self) -> float:
        return self.minor_faults / self.steps if self.steps else float("nan")

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
            minor_faults_per_step=self.minor_faults_per_step,
        )
        return out


def merge_step_stats(rounds: list[StepStats]) -> StepStats:
    """All measured rounds as one record: every step time, mean phases, peak memory, all faults."""
    if not rounds:
        raise ValueError("no measured rounds")
    times = [t for r in rounds for t in r.step_times]
    phase_names = {name for r in rounds for name in r.phases}
    phases = {name: sum(r.phases.get(name, 0.0) * r.steps for r in rounds) / len(times) for name in sorted(phase_names)}
    peak: dict[str, int] = {}
    for r in rounds:
        for device, value in r.peak_memory_bytes.items():
            peak[device] = max(peak.get(device, 0), int(value))
    losses = [x for r in rounds for x in r.losses]
    starts = [sum(r.steps for r in rounds[:i]) for i in range(len(rounds))]
    skipped = [start + i for start, r in zip(starts, rounds) for i in r.skipped_steps]
    return StepStats(
        step_times=times,
        global_batch=rounds[0].global_batch,
        losses=losses,
        phases=phases,
        peak_memory_bytes=peak,
        minor_faults=sum(r.minor_faults for r in rounds),
        skipped_steps=skipped,
    )
