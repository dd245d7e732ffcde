"""``single``: the plain module on one device — the baseline every other strategy is compared with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dpbench.schema import Phase, StrategyName
from dpbench.strategies._options import CompileOptions
from dpbench.strategies.base import Placement, Strategy, call_model, to_device

__all__ = ["Single", "SingleOptions"]


@dataclass(frozen=True, kw_only=True)
class SingleOptions(CompileOptions):
    """``single`` takes only the shared options: ``compile``, ``optimizer`` and ``precision``."""

    strategy = StrategyName.SINGLE.value


class Single(Strategy):
    """One replica on one device (``cpu`` or ``cuda:0``), in one worker process.

    ``world_size`` must be 1: a baseline of several replicas would not be a baseline.
    Options: :class:`SingleOptions`.
    BatchNorm: statistics over the whole global batch (the reference semantics).
    Phases: forward (incl. loss), backward, optimizer.
    """

    name = StrategyName.SINGLE.value
    options_type = SingleOptions

    @classmethod
    def placement(cls, *, world_size: int, device: str, options: SingleOptions) -> Placement:
        if world_size != 1:
            raise ValueError(f"strategy 'single' runs one replica: world_size must be 1, got {world_size}")
        return Placement(
            processes=1,
            backend=None,
            devices=("cuda:0",) if device == "cuda" else ("cpu",),
            concurrent_replicas=1,
        )

    def setup(self) -> None:
        self.device = self.spec.devices[0]
        self.model = self.build_model().to(self.device)
        self.forward_module = self.maybe_compile(self.model)
        self.optimizer = self.make_optimizer(self.model.parameters())
        self.warm_up_compiled()

    def train_step(self, inputs: Any, target: Any) -> Any:
        self.optimizer.zero_grad(set_to_none=True)
        with self.phases(Phase.FORWARD), self.autocast():
            inputs = to_device(inputs, self.device)
            target = to_device(target, self.device)
            loss = self.workload.loss(call_model(self.forward_module, inputs), target)
        return self.backward_and_update(loss)

    def module(self) -> Any:
        return self.model
