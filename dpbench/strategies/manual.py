"""``manual``: the d2l "multi-GPU from scratch" trainer, in one process."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from dpbench.schema import Phase, StrategyName
from dpbench.strategies._options import CommonOptions
from dpbench.strategies.base import Placement, Strategy, call_model

__all__ = ["Manual", "ManualOptions"]


@dataclass(frozen=True, kw_only=True)
class ManualOptions(CommonOptions):
    """``manual`` takes only ``optimizer`` and ``precision``: the d2l trainer has no knobs of its own."""

    strategy = StrategyName.MANUAL.value


class Manual(Strategy):
    """Parameters copied to every device, the batch split with ``dpbench.parallel.scatter``,
    forward/backward per device, then the d2l ``allreduce``: sum every gradient onto device 0
    and copy the sum back; SGD on every device.

    Replicas run one after another in one Python thread (as in d2l; on GPUs the kernels of
    different devices still overlap because launches are asynchronous). On CPU all replicas
    live on ``"cpu"``, so the default threads per worker is all cores.
    Each replica's mean loss is weighted by ``n_r / N``, so the summed gradient is the
    global-batch mean gradient.

    BatchNorm: each replica normalises with its own slice's statistics and keeps its own
    running statistics; the trained model is replica 0.
    Phases: compute (forward + backward of all replicas), communication (the reduce to
    device 0 and the copy back), optimizer.
    Options: :class:`ManualOptions`.
    """

    name = StrategyName.MANUAL.value
    options_type = ManualOptions

    @classmethod
    def placement(cls, *, world_size: int, device: str, options: ManualOptions) -> Placement:
        if device == "cuda":
            import torch

            count = torch.cuda.device_count()
            devices = tuple(f"cuda:{r % count}" for r in range(world_size))
        else:
            devices = ("cpu",) * world_size
        return Placement(processes=1, backend=None, devices=devices, concurrent_replicas=1)

    @classmethod
    def memory_estimate(cls, params: Any, *, world_size: int, options: ManualOptions) -> list[Any]:
        """One worker holding every replica: ``world_size`` copies of everything."""
        from dpbench.strategies.memory import StateMemory, full_state

        one = full_state(params, options.optimizer)
        return [StateMemory(**{key: value * world_size for key, value in one.to_dict().items()})]

    @classmethod
    def peak_estimate(
        cls, state: Any, *, params: Any, activation: Any, batch: int, world_size: int, options: ManualOptions
    ) -> int:
        """Replicas run one after another: one slice's forward + backward at a time."""
        return state.held_bytes() + activation(-(-batch // world_size))

    def setup(self) -> None:
        # Imported here, not at the top: dpbench.parallel imports torch, and the class side
        # (options, placement, memory) is read by torch-free callers.
        from dpbench.parallel import scatter

        self.scatter = scatter
        base = self.build_model()
        self.replicas = [copy.deepcopy(base).to(device) for device in self.spec.devices]
        self.optimizers_per_replica = [self.make_optimizer(r.parameters()) for r in self.replicas]
        # Parameter lists aligned across replicas: params[i][r] is parameter i on replica r.
        per_replica = [list(r.parameters()) for r in self.replicas]
        self.params = list(zip(*per_replica))

    def train_step(self, inputs: Any, target: Any) -> Any:
        import torch

        sizes = self.spec.per_replica_batch
        n = self.spec.global_batch
        for optimizer in self.optimizers_per_replica:
            optimizer.zero_grad(set_to_none=True)
        total = 0.0
        with self.phases(Phase.COMPUTE):
            # d2l's split_batch: scatter the global batch, one shard per device.
            shards_x = self.scatter(inputs, self.spec.devices, chunk_sizes=list(sizes))
            shards_y = self.scatter(target, self.spec.devices, chunk_sizes=list(sizes))
            for replica, x, y, size in zip(self.replicas, shards_x, shards_y, sizes):
                with self.autocast():
                    loss = self.workload.loss(call_model(replica, x), y)
                self.precision.backward(loss * (size / n))
                total = total + loss.detach().to(self.spec.devices[0]) * (size / n)
        with self.phases(Phase.COMMUNICATION):
            with torch.no_grad():
                for copies in self.params:
                    _reduce_and_broadcast(
                        [p.grad if p.grad is not None else torch.zeros_like(p) for p in copies], copies
                    )
        with self.phases(Phase.OPTIMIZER):
            self.precision.step(self.optimizers())
        return total

    def module(self) -> Any:
        return self.replicas[0]

    def optimizers(self) -> list[Any]:
        return list(self.optimizers_per_replica)

    def memory_tensors(self) -> dict[str, list[Any]]:
        from dpbench.strategies.base import optimizer_state_tensors

        params = [p for copies in self.params for p in copies]  # every replica's copy, all in this worker
        return {
            "params": params,
            "grads": [p.grad for p in params if p.grad is not None],
            "optimizer_state": optimizer_state_tensors(self.optimizers()),
        }


def _reduce_and_broadcast(grads: list[Any], params: tuple[Any, ...]) -> None:
    """d2l's allreduce: accumulate every copy into copy 0, then copy the sum back to the others."""
    summed = grads[0]
    for grad in grads[1:]:
        summed += grad.to(summed.device)
    params[0].grad = summed
    for param in params[1:]:
        if param.grad is None:
            param.grad = summed.to(param.device, copy=True)
        else:
            param.grad.copy_(summed)
