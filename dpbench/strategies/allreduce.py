"""``allreduce``: gradient synchronisation written by hand with torch.distributed collectives (no DDP)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dpbench.schema import Phase, StrategyName
from dpbench.strategies._options import CommonOptions, is_positive_number
from dpbench.strategies.base import Placement, Strategy, call_model, to_device
from dpbench.strategies.ddp import DDP
from dpbench.strategies.schedule import BucketSync, StepSchedule

__all__ = ["AllReduce", "AllReduceOptions", "MODES"]

MODES = ("per-param", "bucketed", "overlap")


@dataclass(frozen=True, kw_only=True)
class AllReduceOptions(CommonOptions):
    """``allreduce``'s options: when gradients are summed, and in what pieces."""

    strategy = StrategyName.ALLREDUCE.value

    mode: str = "bucketed"
    """``"per-param"``, ``"bucketed"`` (one allreduce per bucket after backward) or ``"overlap"`` (during it)."""

    bucket_cap_mb: float = 25.0
    """Largest bucket in MB (``"bucketed"`` and ``"overlap"``)."""

    def check(self, *, device: str, world_size: int, global_batch: int) -> None:
        super().check(device=device, world_size=world_size, global_batch=global_batch)
        if self.mode not in MODES:
            raise ValueError(f"allreduce option mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if not is_positive_number(self.bucket_cap_mb):
            raise ValueError(f"allreduce option bucket_cap_mb must be a positive number, got {self.bucket_cap_mb!r}")


class AllReduce(Strategy):
    """One process per rank; gradients summed with ``dist.all_reduce`` after (or during) backward.

    Each rank weights its local mean loss by ``n_local / N``, so the *sum* over ranks of the
    gradients is the global-batch mean gradient and no division is needed afterwards.

    Options: :class:`AllReduceOptions`. ``mode``: ``"per-param"`` — one blocking all_reduce per
    gradient after backward; ``"bucketed"`` — gradients packed into flat buckets of at most ``bucket_cap_mb`` MB
    (parameters in reverse registration order, roughly the order backward produces them)
    and one all_reduce per bucket after backward; ``"overlap"`` — the same buckets, each
    launched asynchronously from ``register_post_accumulate_grad_hook`` as soon as its last
    gradient is ready, so communication overlaps the rest of backward; the handles are
    awaited before the optimizer step. Buckets are always launched in index order so every
    rank issues the collectives in the same sequence.

    BatchNorm: each rank normalises with its own slice's statistics and keeps its own
    running statistics (nothing syncs buffers); the trained model is rank 0's.
    Phases: compute (forward + backward, incl. launching overlapped buckets),
    communication (gradient sync not hidden behind compute), optimizer.
    """

    name = StrategyName.ALLREDUCE.value
    multiprocess = True
    options_type = AllReduceOptions

    @classmethod
    def placement(cls, *, world_size: int, device: str, options: AllReduceOptions) -> Placement:
        # Same process and device layout as DDP, so the two compare like for like.
        return DDP.placement(world_size=world_size, device=device, options=options)

    @classmethod
    def memory_estimate(cls, params: Any, *, world_size: int, options: AllReduceOptions) -> list[Any]:
        """Every rank whole; "bucketed" and "overlap" keep flat buckets as large as the gradients.

        Every trainable parameter ends a step with a gradient (zeros when it got none): the sync
        fills them all."""
        from dpbench.strategies.memory import full_state

        flat = 0 if options.mode == "per-param" else sum(p.nbytes for p in params if p.trainable)
        return [full_state(params, options.optimizer, comm_buffer_bytes=flat)] * world_size

    @classmethod
    def step_schedule(cls, options: AllReduceOptions) -> StepSchedule:
        """Flat buckets of ``bucket_cap_mb`` (no small first one) all-reduced after backward, or with
        ``mode="overlap"`` as backward makes each ready; ``per-param`` as ``bucketed`` (a run does
        not record each parameter's size). Forward and backward are timed as one phase."""
        cap = int(float(options.bucket_cap_mb or 25.0) * (1 << 20))
        return StepSchedule(
            gradients=BucketSync(first_bytes=None, cap_bytes=cap, overlap=options.mode == "overlap"),
            fused_compute=True,
            notes=("allreduce times forward and backward as one phase: split 1:2 where its overlap mode needs it",),
        )

    def setup(self) -> None:
        import torch.distributed as dist

        self.device = self.ctx.device
        self.model = self.build_model().to(self.device)
        # Same seed already gives the same weights; the broadcast makes it hold even for
        # factories that are not deterministic (untimed, once).
        for tensor in list(self.model.parameters()) + list(self.model.buffers()):
            dist.broadcast(tensor.data, src=0, group=self.ctx.group)
        self.optimizer = self.make_optimizer(self.model.parameters())
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.mode = self.spec.options.mode
        self.buckets = _make_buckets(self.params, int(self.spec.options.bucket_cap_mb * 1024 * 1024))
        if self.mode == "overlap":
            self._bucket_of = {id(p): b for b, bucket in enumerate(self.buckets) for p in bucket.params}
            for p in self.params:
                p.register_post_accumulate_grad_hook(self._grad_ready)

    def train_step(self, inputs: Any, target: Any) -> Any:
        self.optimizer.zero_grad(set_to_none=True)
        if self.mode == "overlap":
            for bucket in self.buckets:
                bucket.reset()
            self._next_launch = 0
        weight = self.spec.per_replica_batch[self.rank] / self.spec.global_batch
        with self.phases(Phase.COMPUTE):
            x = to_device(inputs, self.device)
            y = to_device(target, self.device)
            with self.autocast():
                loss = self.workload.loss(call_model(self.model, x), y)
            self.precision.backward(loss * weight)
        with self.phases(Phase.COMMUNICATION):
            if self.mode == "per-param":
                for p in self.params:
                    self._all_reduce(_grad_or_zeros(p))
            elif self.mode == "bucketed":
                for bucket in self.buckets:
                    bucket.pack()
                    self._all_reduce(bucket.flat)
                    bucket.unpack()
            else:
                self._finish_overlap()
        with self.phases(Phase.OPTIMIZER):
            self.precision.step(self.optimizers())
        return loss.detach()

    def _all_reduce(self, tensor: Any, async_op: bool = False) -> Any:
        import torch.distributed as dist

        return dist.all_reduce(tensor, group=self.ctx.group, async_op=async_op)

    def _grad_ready(self, param: Any) -> None:
        # Runs inside backward, right after param.grad was accumulated.
        bucket = self.buckets[self._bucket_of[id(param)]]
        bucket.ready += 1
        # Launch every complete bucket in index order (never out of order: collectives must
        # be issued in the same sequence on every rank or they would pair up wrongly).
        while self._next_launch < len(self.buckets) and self.buckets[self._next_launch].complete:
            ready_bucket = self.buckets[self._next_launch]
            ready_bucket.pack()
            ready_bucket.work = self._all_reduce(ready_bucket.flat, async_op=True)
            self._next_launch += 1

    def _finish_overlap(self) -> None:
        # Buckets whose parameters got no gradient this step were never launched: send them
        # now (as zeros) so every rank still issues the same collectives.
        while self._next_launch < len(self.buckets):
            bucket = self.buckets[self._next_launch]
            bucket.pack()
            bucket.work = self._all_reduce(bucket.flat, async_op=True)
            self._next_launch += 1
        for bucket in self.buckets:
            bucket.work.wait()  # the optimizer must see the summed gradients
            bucket.unpack()

    def module(self) -> Any:
        return self.model


def _grad_or_zeros(param: Any) -> Any:
    import torch

    if param.grad is None:
        param.grad = torch.zeros_like(param)
    return param.grad


class _Bucket:
    """A flat buffer holding the gradients of some parameters, reduced with one collective."""

    def __init__(self, params: list[Any]):
        import torch

        self.params = params
        self.flat = torch.zeros(sum(p.numel() for p in params), dtype=params[0].dtype, device=params[0].device)
        self.ready = 0
        self.work: Any = None

    @property
    def complete(self) -> bool:
        return self.ready >= len(self.params)

    def reset(self) -> None:
        self.ready, self.work = 0, None

    def pack(self) -> None:
        offset = 0
        for p in self.params:
            n = p.numel()
            if p.grad is None:
                self.flat[offset : offset + n].zero_()
            else:
                self.flat[offset : offset + n].copy_(p.grad.reshape(-1))
            offset += n

    def unpack(self) -> None:
        offset = 0
        for p in self.params:
            n = p.numel()
            view = self.flat[offset : offset + n].view_as(p)
            if p.grad is None:
                p.grad = view.clone()
            else:
                p.grad.copy_(view)
            offset += n


def _make_buckets(params: list[Any], cap_bytes: int) -> list[_Bucket]:
    """Reverse registration order (≈ gradient order); a new bucket when cap or dtype/device changes."""
    buckets: list[list[Any]] = []
    size = 0
    for p in reversed(params):
        nbytes = p.numel() * p.element_size()
        current = buckets[-1] if buckets else None
        if current is None or size + nbytes > cap_bytes or (current[0].dtype, current[0].device) != (p.dtype, p.device):
            buckets.append([p])
            size = nbytes
        else:
            current.append(p)
            size += nbytes
    return [_Bucket(group) for group in buckets]
