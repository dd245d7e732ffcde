"""``zero``: DDP with ``torch.distributed.optim.ZeroRedundancyOptimizer`` (ZeRO-1: optimizer state sharded)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dpbench.schema import Phase, StrategyName
from dpbench.strategies._options import CommonOptions, is_positive_number
from dpbench.strategies.base import (
    Placement,
    Strategy,
    StrategyUnavailable,
    call_model,
    optimizer_class,
    optimizer_state_tensors,
    to_device,
)
from dpbench.strategies.ddp import DDP, DDPOptions, ddp_buckets
from dpbench.strategies.schedule import StepSchedule

__all__ = ["Zero", "ZeroOptions", "zero_partition"]

# hook_with_zero_step needs DDP's buckets, which are final after this many iterations
# (torch's documented warning: 2 without static_graph); those iterations do not update.
_OVERLAP_WARMUP_ITERATIONS = 2


@dataclass(frozen=True, kw_only=True)
class ZeroOptions(CommonOptions):
    """``zero``'s options: DDP's bucket size, and whether the optimizer steps inside DDP's hook."""

    strategy = StrategyName.ZERO.value

    bucket_cap_mb: float | None = None
    """DDP's gradient bucket size in MB (None: DDP's default, 25)."""

    overlap_with_ddp: bool = False
    """Step the optimizer inside DDP's communication hook, bucket by bucket (nccl, one GPU per rank).

    torch supports it on NCCL only; the two warm-up iterations torch needs before it updates run
    untimed in set-up and change nothing. Not with ``precision="fp16"``: the step inside the hook
    cannot be unscaled.
    """

    def check(self, *, device: str, world_size: int, global_batch: int) -> None:
        super().check(device=device, world_size=world_size, global_batch=global_batch)
        cap = self.bucket_cap_mb
        if cap is not None and not is_positive_number(cap):
            raise ValueError(f"zero option bucket_cap_mb must be None or a positive number, got {cap!r}")
        self.require_bool("overlap_with_ddp")
        if self.overlap_with_ddp:
            self._check_overlap_runnable(device=device, world_size=world_size)

    def _check_overlap_runnable(self, *, device: str, world_size: int) -> None:
        if device != "cuda" or world_size > _cuda_count():
            raise StrategyUnavailable(
                "zero option overlap_with_ddp=True needs the nccl backend (device='cuda', one GPU per rank): "
                "torch's hook_with_zero_step raises on any other backend"
            )
        if self.precision == "fp16":
            raise StrategyUnavailable(
                "zero option overlap_with_ddp=True cannot run with precision='fp16': the optimizer steps inside "
                "DDP's communication hook, where a GradScaler cannot unscale the gradients first"
            )


class Zero(Strategy):
    """DistributedDataParallel for the gradients, ZeroRedundancyOptimizer for the update.

    Every rank holds the full parameters and gradients (DDP all-reduces them) but only the
    optimizer state of its partition (ZeRO greedily assigns whole parameters to ranks, so
    "about 1/W" each); after its local step each rank broadcasts its updated parameters.

    Options: :class:`ZeroOptions`. Loss weighting and BatchNorm semantics are DDP's
    (``broadcast_buffers`` on).
    Phases: forward, backward (incl. the all-reduce, and the step with ``overlap_with_ddp``),
    optimizer (local step + parameter broadcasts).
    """

    name = StrategyName.ZERO.value
    multiprocess = True
    options_type = ZeroOptions

    @classmethod
    def placement(cls, *, world_size: int, device: str, options: ZeroOptions) -> Placement:
        return DDP.placement(world_size=world_size, device=device, options=options)

    @classmethod
    def memory_estimate(cls, params: Any, *, world_size: int, options: ZeroOptions) -> list[Any]:
        """DDP's parameters, gradients and buckets; each rank the state of its ZeRO partition."""
        from dataclasses import replace

        from dpbench.strategies.memory import optimizer_state_bytes

        # The DDP inside zero keeps gradients apart from its buckets (no gradient_as_bucket_view).
        as_ddp = DDPOptions(optimizer=options.optimizer, precision=options.precision)
        ddp = DDP.memory_estimate(params, world_size=world_size, options=as_ddp)
        return [
            replace(
                ddp[rank], optimizer_state_bytes=sum(optimizer_state_bytes(options.optimizer, p.nbytes) for p in own)
            )
            for rank, own in enumerate(zero_partition(params, world_size))
        ]

    @classmethod
    def step_schedule(cls, options: ZeroOptions) -> StepSchedule:
        """DDP's step (its DDP keeps ``broadcast_buffers`` on): the buffers' broadcast, the buckets
        all-reduced overlapping backward; then the optimizer on this rank's partition (1/N of it),
        and every rank broadcasts its partition."""
        return StepSchedule(
            gradients=ddp_buckets(options.bucket_cap_mb),
            buffer_broadcast=True,
            sharded_optimizer=True,
            partition_broadcast=True,
        )

    def setup(self) -> None:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        from torch.nn.parallel import DistributedDataParallel

        opts = self.spec.options
        self.device = self.ctx.device
        kwargs: dict[str, Any] = {}
        if opts.bucket_cap_mb is not None:
            kwargs["bucket_cap_mb"] = opts.bucket_cap_mb
        if self.device.type == "cuda":
            kwargs["device_ids"] = [self.device.index]
        self.ddp = DistributedDataParallel(self.build_model().to(self.device), process_group=self.ctx.group, **kwargs)
        self.overlap = opts.overlap_with_ddp
        self.optimizer = ZeroRedundancyOptimizer(
            self.ddp.parameters(),
            optimizer_class=optimizer_class(opts.optimizer),
            process_group=self.ctx.group,
            overlap_with_ddp=self.overlap,
            lr=self.spec.lr,
        )
        if self.overlap:
            self._start_overlap()

    def _start_overlap(self) -> None:
        from torch.distributed.algorithms.ddp_comm_hooks.ddp_zero_hook import hook_with_zero_step
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        self.ddp.register_comm_hook(None, hook_with_zero_step(allreduce_hook, self.ddp, self.optimizer))
        inputs, target = self.local_batch(0)
        for _ in range(_OVERLAP_WARMUP_ITERATIONS):  # untimed; torch performs no update in these
            self._forward_backward(inputs, target)
            self.ddp.zero_grad(set_to_none=True)

    def _forward_backward(self, inputs: Any, target: Any) -> Any:
        with self.phases(Phase.FORWARD), self.autocast():
            x = to_device(inputs, self.device)
            y = to_device(target, self.device)
            loss = self.workload.loss(call_model(self.ddp, x), y)
        with self.phases(Phase.BACKWARD):
            self.precision.backward(loss * self.loss_weight())  # DDP-style weighting for uneven slices
        return loss.detach()

    def train_step(self, inputs: Any, target: Any) -> Any:
        self.optimizer.zero_grad(set_to_none=True)
        loss = self._forward_backward(inputs, target)
        if not self.overlap:  # with overlap the hook already stepped, bucket by bucket
            with self.phases(Phase.OPTIMIZER):
                self.precision.step(self.optimizers())
        return loss

    def module(self) -> Any:
        return self.ddp.module

    # -- case metrics ------------------------------------------------------------------------
    def _local_optimizer(self) -> Any:
        return self.optimizer.optim  # ZeroRedundancyOptimizer's optimizer over this rank's partition

    def memory_tensors(self) -> dict[str, list[Any]]:
        params = list(self.ddp.module.parameters())
        return {
            "params": params,
            "grads": [p.grad for p in params if p.grad is not None],
            "optimizer_state": optimizer_state_tensors([self._local_optimizer()]),
        }

    def _local_indices(self) -> list[int]:
        local = {id(p) for group in self._local_optimizer().param_groups for p in group["params"]}
        return [i for i, p in enumerate(self.ddp.module.parameters()) if id(p) in local]

    def compute_only_share(self, twin: Any) -> list[Any]:
        params = list(twin.parameters())
        return [params[i] for i in self._local_indices()]  # the partition this rank steps

    def collective_plan(self) -> list[Any]:
        import torch.distributed as dist

        from dpbench.strategies.ddp import ddp_collectives
        from dpbench.strategies.profiling import Collective

        params = list(self.ddp.module.parameters())
        local = [(params[i].numel(), str(params[i].dtype).replace("torch.", "")) for i in self._local_indices()]
        partitions: list[Any] = [None] * self.spec.world_size
        dist.all_gather_object(partitions, local, group=self.ctx.group)
        plan = ddp_collectives(
            self.ddp.module, bucket_cap_mb=self.spec.options.bucket_cap_mb, comm_dtype=None, broadcast_buffers=True
        )
        # After its local step each rank broadcasts its partition, parameter by parameter.
        for rank, partition in enumerate(partitions):
            plan += [Collective(op="broadcast", numel=n, dtype=d, src=rank) for n, d in partition]
        return plan


def zero_partition(params: Any, world_size: int) -> list[list[Any]]:
    """The trainable parameters each rank steps: ZeroRedundancyOptimizer's greedy split (largest
    first, each to the rank with the fewest elements so far, the lowest rank on a tie)."""
    sizes = [0] * world_size
    out: list[list[Any]] = [[] for _ in range(world_size)]
    for p in sorted((p for p in params if p.trainable), key=lambda p: p.numel, reverse=True):
        rank = sizes.index(min(sizes))
        out[rank].append(p)
        sizes[rank] += p.numel
    return out


def _cuda_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0
