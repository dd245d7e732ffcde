"""The Workload: what every strategy trains — a model factory, a batch factory and a loss."""
from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["Workload", "ModelFactory", "BatchFactory", "LossFn", "check_picklable"]

ModelFactory = Callable[[], nn.Module]
# batch(step, global_batch, seed) -> (inputs, target): the full global batch of that step.
BatchFactory = Callable[[int, int, int], tuple[Any, Any]]
LossFn = Callable[[Any, Any], torch.Tensor]


def cross_entropy(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(output, target)


@dataclass(kw_only=True, frozen=True)
class Workload:
    """A model, its data and its loss, identical under every strategy.

    ``model()`` returns a fresh ``nn.Module`` (strategies seed the RNG before calling it so
    every strategy starts from the same weights). ``batch(step, global_batch, seed)``
    returns the *global* ``(inputs, target)`` of that step, deterministic in its arguments;
    each replica or rank takes its slice along dim 0. ``loss(output, target)`` returns a
    scalar. Inputs may be a tensor or a tuple of tensors (passed as positional arguments).
    For multi-process strategies all three must be picklable (module-level functions or
    ``functools.partial`` of them, not lambdas).
    """

    model: ModelFactory
    batch: BatchFactory
    loss: LossFn = cross_entropy
    name: str = "custom"
    description: str = ""
    # True when forward is stochastic or keeps per-replica state (dropout, BatchNorm), so
    # strategies are not expected to match `single` exactly.
    stateful: bool = False
    tags: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        for attr in ("model", "batch", "loss"):
            if not callable(getattr(self, attr)):
                raise TypeError(
                    f"Workload.{attr} must be callable, got {type(getattr(self, attr)).__name__}"
                )

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "stateful": self.stateful}


def check_picklable(workload: Workload) -> None:
    """Raise ``TypeError`` naming the part of ``workload`` that cannot cross a process boundary."""
    for attr in ("model", "batch", "loss"):
        try:
            pickle.dumps(getattr(workload, attr))
        except Exception as exc:  # pickle raises several types (PicklingError, AttributeError, TypeError)
            raise TypeError(
                f"Workload.{attr} of workload {workload.name!r} is not picklable, so it cannot be sent to "
                f"worker processes ({type(exc).__name__}: {exc}); define it as a module-level function "
                f"or a functools.partial of one, not a lambda or a local function"
            ) from exc
