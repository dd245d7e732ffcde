"""``torch-dp``: ``torch.nn.DataParallel`` unmodified — the reference dpbench's own ``dp`` is measured against."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from dpbench.schema import Phase, StrategyName
from dpbench.strategies._options import CommonOptions
from dpbench.strategies.base import Placement, Strategy, StrategyUnavailable, call_model, to_device

__all__ = ["TorchDP", "TorchDPOptions"]


@dataclass(frozen=True, kw_only=True)
class TorchDPOptions(CommonOptions):
    """``torch-dp`` takes only ``optimizer`` and ``precision``: torch's DataParallel has no other knob used here."""

    strategy = StrategyName.TORCH_DP.value

    def check(self, *, device: str, world_size: int, global_batch: int) -> None:
        super().check(device=device, world_size=world_size, global_batch=global_batch)
        if self.precision == "bf16" and world_size >= 2:
            # torch.nn.parallel.parallel_apply (torch 2.13) re-enters autocast in each replica
            # thread as autocast(device, enabled=...) without the dtype, and the autocast dtype
            # is thread-local: the replicas would compute in CUDA's default, float16, with no
            # loss scaling, under a "bf16" label. One replica runs in the calling thread (fine).
            raise StrategyUnavailable(
                "torch-dp with precision='bf16' and world_size >= 2 would compute in float16: "
                "torch.nn.DataParallel's replica threads re-enter autocast without its dtype "
                "(torch.nn.parallel.parallel_apply); use dp (dpbench's DataParallel carries the dtype) "
                "or precision='fp16'/'fp32'"
            )


class TorchDP(Strategy):
    """``torch.nn.DataParallel`` over ``cuda:0 .. cuda:W-1`` in one worker process; CUDA only.

    torch's scatter splits the batch with ``torch.chunk`` (ceil(N/W) per replica, the last
    smaller, possibly fewer than W replicas used) and it has no option for other splits, so
    ``Run.info.per_replica_batch`` reports torch's split rather than the common one. The loss
    is taken on the gathered output, so the gradient is the global-batch mean whatever the
    split. BatchNorm: per-replica slice statistics; running statistics are replica 0's
    (torch's documented guarantee). Phases: forward (scatter + replicate + apply + gather +
    loss, which torch does not expose separately), backward, optimizer.
    Options: :class:`TorchDPOptions`.
    """

    name = StrategyName.TORCH_DP.value
    # The replicas are concurrent threads of one process: the trace records their ops by thread, and
    # nothing ties a thread to a replica, so a per-rank breakdown (and a skew) would be invented.
    trace_unavailable = (
        "its replicas run as threads of one worker process, which the profiler cannot attribute to ranks"
    )
    options_type = TorchDPOptions

    @classmethod
    def placement(cls, *, world_size: int, device: str, options: TorchDPOptions) -> Placement:
        if device != "cuda":
            raise StrategyUnavailable(
                f"torch-dp needs CUDA: torch.nn.DataParallel only runs on CUDA devices (device={device!r})"
            )
        import torch

        count = torch.cuda.device_count()
        if world_size > count:
            raise StrategyUnavailable(
                f"torch-dp with world_size={world_size} needs {world_size} CUDA devices "
                f"(one replica per GPU), found {count}"
            )
        return Placement(
            processes=1,
            backend=None,
            devices=tuple(f"cuda:{r}" for r in range(world_size)),
            concurrent_replicas=1,
        )

    @classmethod
    def peak_estimate(
        cls, state: Any, *, params: Any, activation: Any, batch: int, world_size: int, options: TorchDPOptions
    ) -> int:
        """The module's state, the step's replicas of the parameters and every slice's activations at once."""
        return state.held_bytes() + (world_size - 1) * state.params_bytes + activation(batch)

    @classmethod
    def per_replica_batch(cls, global_batch: int, world_size: int, options: TorchDPOptions) -> list[int]:
        chunk = math.ceil(global_batch / world_size)
        return [min(chunk, global_batch - start) for start in range(0, global_batch, chunk)]

    def setup(self) -> None:
        import torch

        self.output_device = self.spec.devices[0]
        self.model = self.build_model().to(self.output_device)
        device_ids = [int(d.split(":")[1]) for d in self.spec.devices]
        self.dp = torch.nn.DataParallel(self.model, device_ids=device_ids, output_device=device_ids[0])
        self.optimizer = self.make_optimizer(self.model.parameters())

    def train_step(self, inputs: Any, target: Any) -> Any:
        self.optimizer.zero_grad(set_to_none=True)
        with self.phases(Phase.FORWARD), self.autocast():
            target = to_device(target, self.output_device)
            loss = self.workload.loss(call_model(self.dp, inputs), target)
        return self.backward_and_update(loss)

    def module(self) -> Any:
        return self.model
