"""What one training step of a workload costs, before any process starts: its FLOPs counted on the
meta device (no memory, no compute), the machine's measured matmul rate, and so about how long one
``single`` step would take — with what dominates it and how to shrink it, so that a workload sized
for a GPU (GPT-2's 50,257-token vocabulary at batch 64 on a CPU) is said before the trials start.

The estimate is a lower bound (peak matmul rate, no memory traffic); it is only used to warn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["SLOW_STEP_S", "StepCost", "slow_step_line", "step_cost"]

SLOW_STEP_S = 1.0
"""A single step estimated above this is said before the trials: five trials of a few rounds of
several steps per configuration then take minutes per configuration."""


@dataclass(frozen=True, kw_only=True)
class StepCost:
    """One step of ``single`` at a global batch, estimated."""

    flops: int
    """Forward and backward FLOPs of one step (torch's flop counter, on the meta device)."""
    rate: float
    """The machine's measured fp32 matmul rate, FLOP/s."""
    parameters: int
    largest: str
    """The largest parameter tensor: its name and shape."""
    largest_parameters: int

    @property
    def seconds(self) -> float:
        return self.flops / self.rate if self.rate > 0 else float("inf")


def step_cost(workload: Any, global_batch: int, *, rate: float | None = None) -> StepCost | None:
    """The step's cost, or None where the model cannot run on the meta device (its launch says more)."""
    import torch

    from dpbench.strategies._metrics import count_step_flops_by_kind, measure_matmul_flops
    from dpbench.strategies.base import to_device

    try:
        with torch.device("meta"):
            model = workload.model()
        inputs, target = workload.batch(0, global_batch, 0)
        kinds = count_step_flops_by_kind(
            model, to_device(inputs, torch.device("meta")), to_device(target, torch.device("meta")), workload.loss
        )
    except Exception:  # a model or loss with no meta path: nothing to say before its launch
        return None
    named = list(model.named_parameters())  # tied weights once
    name, tensor = max(named, key=lambda nt: nt[1].numel()) if named else ("", None)
    return StepCost(
        flops=sum(kinds.values()),
        rate=rate if rate is not None else measure_matmul_flops(),
        parameters=sum(p.numel() for _, p in named),
        largest=f"{name} ({'×'.join(map(str, tensor.shape))})" if tensor is not None else "",
        largest_parameters=tensor.numel() if tensor is not None else 0,
    )


def slow_step_line(spec: str, cost: StepCost, global_batch: int, *, limit: float = SLOW_STEP_S) -> str | None:
    """One line where a single step is estimated above ``limit`` seconds: its FLOPs and time, what
    dominates it and how to shrink it; None below."""
    if cost.seconds <= limit:
        return None
    share = cost.largest_parameters / cost.parameters if cost.parameters else 0.0
    dominates = (
        f"{cost.largest} holds {share:.0%} of its {cost.parameters / 1e6:.3g} M parameters"
        if share >= 0.3
        else f"{cost.parameters / 1e6:.3g} M parameters, the largest {cost.largest}"
    )
    return (
        f"{spec}: a single step is about {cost.flops / 1e9:,.0f} GFLOP at global batch {global_batch}, at least "
        f"{cost.seconds:.1f} s on this machine ({cost.rate / 1e9:.0f} GFLOP/s measured); {dominates}; "
        "shrink it with @overrides of the model's size (e.g. a smaller vocabulary or width) or a smaller batch"
    )
