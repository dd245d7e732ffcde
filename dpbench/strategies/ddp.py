"""``ddp``: ``torch.nn.parallel.DistributedDataParallel``, one process per replica."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from dpbench.schema import Phase, StrategyName, coarsest_precision
from dpbench.strategies._options import CommonOptions, CompileOptions, is_int_in, is_positive_number
from dpbench.strategies.base import (
    Placement,
    Strategy,
    StrategyUnavailable,
    call_model,
    split_sizes,
    take_slice,
)
from dpbench.strategies.schedule import BucketSync, StepSchedule

__all__ = ["DDP", "DDPOptions", "COMM_HOOKS", "ddp_buckets", "ddp_collectives"]

COMM_HOOKS = ("fp16", "bf16", "powersgd")
# DDP keeps its first bucket small so the first all-reduce starts early (torch's
# dist._DEFAULT_FIRST_BUCKET_BYTES); later buckets hold up to bucket_cap_mb.
_FIRST_BUCKET_BYTES = 1 << 20
_DEFAULT_BUCKET_CAP_MB = 25.0
_COMM_DTYPES = {"fp16": "float16", "bf16": "bfloat16"}  # the compression hooks' wire dtypes
_BOOL_OPTIONS = (
    "gradient_as_bucket_view",
    "static_graph",
    "find_unused_parameters",
    "broadcast_buffers",
    "sync_batchnorm",
)


@dataclass(frozen=True, kw_only=True)
class DDPOptions(CompileOptions):
    """``ddp``'s options: passed to ``DistributedDataParallel`` unchanged unless the field says otherwise.

    ``compile`` wraps the DDP module in ``torch.compile`` (DDPOptimizer splits the graph at bucket
    boundaries).
    """

    strategy = StrategyName.DDP.value

    bucket_cap_mb: float | None = None
    """Gradient bucket size in MB (None: DDP's default, 25)."""

    gradient_as_bucket_view: bool = False
    """Gradients are views into the allreduce buckets (no copy between them)."""

    static_graph: bool = False
    """Tell DDP the graph is the same every step (not with ``accumulation_steps`` > 1)."""

    find_unused_parameters: bool = False
    """Walk the autograd graph every step for parameters that got no gradient."""

    broadcast_buffers: bool = True
    """Broadcast rank 0's buffers (BatchNorm running statistics) before each step's first forward."""

    sync_batchnorm: bool = False
    """CUDA only: convert BatchNorm layers to ``nn.SyncBatchNorm`` (statistics over the global batch)."""

    comm_hook: str | None = None
    """Gradient compression: ``"fp16"``, ``"bf16"`` or ``"powersgd"`` (both nccl only); None: plain allreduce.

    ``"fp16"`` and ``"bf16"`` are torch's ``default_hooks`` compression hooks (bf16 needs NCCL 2.10+;
    fp16 also runs on gloo); ``"powersgd"`` is rank-1 PowerSGD after 2 plain steps, lossy by design
    (on gloo its collectives can pair up out of order across ranks).
    """

    accumulation_steps: int = 1
    """Micro-batches per rank slice, all but the last under ``no_sync()`` (not with ``static_graph``)."""

    def check(self, *, device: str, world_size: int, global_batch: int) -> None:
        super().check(device=device, world_size=world_size, global_batch=global_batch)
        self._check_values(world_size=world_size, global_batch=global_batch)
        self._check_runnable(device=device, world_size=world_size)

    def _check_values(self, *, world_size: int, global_batch: int) -> None:
        cap = self.bucket_cap_mb
        if cap is not None and not is_positive_number(cap):
            raise ValueError(f"ddp option bucket_cap_mb must be None or a positive number, got {cap!r}")
        self.require_bool(*_BOOL_OPTIONS)
        hook = self.comm_hook
        if hook is not None and hook not in COMM_HOOKS:
            raise ValueError(f"ddp option comm_hook must be None or one of {', '.join(COMM_HOOKS)}, got {hook!r}")
        smallest = global_batch // world_size
        if not is_int_in(self.accumulation_steps, 1, smallest):
            raise ValueError(
                f"ddp option accumulation_steps must be an int between 1 and the smallest per-rank "
                f"batch ({smallest}), got {self.accumulation_steps!r}"
            )

    def _check_runnable(self, *, device: str, world_size: int) -> None:
        hook = self.comm_hook
        if hook == "bf16" and (device != "cuda" or world_size > _cuda_count()):
            # torch's own check: the bf16 hook needs NCCL >= 2.10 (or XCCL); gloo has none. Ranks
            # sharing a GPU run gloo, where the hook would run (gloo sums bf16) but not as published.
            raise StrategyUnavailable(
                "ddp option comm_hook='bf16' needs device='cuda' and one GPU per rank (the nccl backend: "
                f"torch requires NCCL 2.10+ for it; {world_size} ranks on {_cuda_count()} GPU(s) would run gloo)"
            )
        if hook == "powersgd" and (device != "cuda" or world_size > _cuda_count()):
            # On gloo, once a model has several buckets, the PowerSGD hook's collectives (issued
            # from future callbacks) can pair up out of order across ranks: an error or a hang.
            raise StrategyUnavailable(
                "ddp option comm_hook='powersgd' needs the nccl backend (device='cuda', one GPU per rank): "
                "on gloo torch's PowerSGD hook can issue its collectives in different orders on "
                "different ranks and hang or fail"
            )
        if self.static_graph and self.accumulation_steps > 1:
            # Known torch bug: the first no_sync() backward trips an internal assert in the
            # reducer, and once past it gradients silently stop being all-reduced
            # (pytorch/pytorch#143580).
            raise StrategyUnavailable(
                "ddp options static_graph=True and accumulation_steps>1 cannot be combined: torch DDP's "
                "static graph mode breaks under no_sync() (pytorch/pytorch#143580)"
            )
        if self.sync_batchnorm and device != "cuda":
            raise StrategyUnavailable(
                "ddp option sync_batchnorm needs device='cuda': torch's SyncBatchNorm rejects CPU input"
            )


class DDP(Strategy):
    """DistributedDataParallel: gloo on CPU, nccl on CUDA (gloo when ranks share a GPU).

    Options: :class:`DDPOptions`.

    BatchNorm: each rank normalises with the statistics of its own slice; with
    ``broadcast_buffers=True`` (default) rank 0's running statistics are broadcast to all
    ranks before each step's first forward (once per step under accumulation), so the trained
    model carries rank 0's running stats. With ``sync_batchnorm=True`` statistics are over the
    global batch, as in ``single``.
    Phases: forward (incl. loss), backward (incl. DDP's overlapped allreduce), optimizer.
    """

    name = StrategyName.DDP.value
    multiprocess = True
    options_type = DDPOptions

    @classmethod
    def placement(cls, *, world_size: int, device: str, options: CommonOptions) -> Placement:
        # zero and allreduce place their ranks as ddp does: no option of either kind is read here.
        if device == "cuda":
            import torch

            count = torch.cuda.device_count()
            # NCCL cannot put two ranks on one GPU; gloo can (and is then the only choice).
            backend = "nccl" if world_size <= count else "gloo"
            devices = tuple(f"cuda:{r % count}" for r in range(world_size))
        else:
            backend, devices = "gloo", ("cpu",) * world_size
        return Placement(processes=world_size, backend=backend, devices=devices, concurrent_replicas=world_size)

    @classmethod
    def memory_estimate(cls, params: Any, *, world_size: int, options: DDPOptions) -> list[Any]:
        """Every rank whole; the reducer's buckets hold a second copy of the gradients unless the
        gradients are views into them (``gradient_as_bucket_view``)."""
        from dpbench.strategies.memory import full_state

        buckets = 0 if options.gradient_as_bucket_view else sum(p.nbytes for p in params if p.trainable)
        return [full_state(params, options.optimizer, comm_buffer_bytes=buckets)] * world_size

    @classmethod
    def step_schedule(cls, options: DDPOptions) -> StepSchedule:
        """With ``broadcast_buffers`` a broadcast of rank 0's buffers before the first forward (DDP
        syncs them synchronously, once per step); the buckets all-reduced in ready order,
        overlapping the rest of backward; ``accumulation_steps`` micro-batches, all but the last
        under ``no_sync()``. The overlap slowdown is fitted on its cases (every collective of its
        step overlaps backward or waits for it)."""
        return StepSchedule(
            gradients=ddp_buckets(options.bucket_cap_mb),
            micro_batches=int(options.accumulation_steps or 1),
            buffer_broadcast=bool(options.broadcast_buffers),
            calibrates_overlap=True,
        )

    def setup(self) -> None:
        import torch
        from torch.nn.parallel import DistributedDataParallel

        opts = self.spec.options
        self.device = self.ctx.device
        model = self.build_model()
        if opts.sync_batchnorm:
            model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
        model = model.to(self.device)
        kwargs: dict[str, Any] = {
            "gradient_as_bucket_view": opts.gradient_as_bucket_view,
            "static_graph": opts.static_graph,
            "find_unused_parameters": opts.find_unused_parameters,
        }
        if not opts.broadcast_buffers:
            # Passed only when off: torch 2.13 deprecates the name in favour of
            # forward_sync_buffers but still recommends it for "no buffer sync" (the default
            # True is DDP's own default, so leaving it out keeps older torch working too).
            kwargs["broadcast_buffers"] = False
        if opts.bucket_cap_mb is not None:
            kwargs["bucket_cap_mb"] = opts.bucket_cap_mb
        if self.device.type == "cuda":
            kwargs["device_ids"] = [self.device.index]
        self.ddp = DistributedDataParallel(model, process_group=self.ctx.group, **kwargs)
        self._register_hook(opts.comm_hook)
        self.forward_module = self.maybe_compile(self.ddp)
        self.optimizer = self.make_optimizer(self.ddp.parameters())
        self._micro = opts.accumulation_steps
        self.warm_up_compiled()

    def _register_hook(self, hook: str | None) -> None:
        if hook is None:
            return
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

        if hook == "fp16":
            self.ddp.register_comm_hook(self.ctx.group, default_hooks.fp16_compress_hook)
        elif hook == "bf16":
            self.ddp.register_comm_hook(self.ctx.group, default_hooks.bf16_compress_hook)
        else:
            state = powerSGD_hook.PowerSGDState(
                process_group=self.ctx.group, matrix_approximation_rank=1, start_powerSGD_iter=2
            )
            self.ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)

    def train_step(self, inputs: Any, target: Any) -> Any:
        n_local = self.spec.per_replica_batch[self.rank]
        # Weight so that DDP's mean over ranks equals the global-batch mean (uneven splits).
        weight = self.loss_weight()
        self.optimizer.zero_grad(set_to_none=True)
        total = 0.0
        start = 0
        sizes = split_sizes(n_local, self._micro)
        for index, size in enumerate(sizes):
            last = index == len(sizes) - 1
            # Views of the rank's slice, staged on the device before the clock (Strategy.stage_batch):
            # no copy, so no host sync, per micro-batch.
            x = take_slice(inputs, start, size)
            y = take_slice(target, start, size)
            start += size
            # Micro-batches before the last accumulate locally; the last one's backward
            # triggers the allreduce of the accumulated gradient.
            sync_context = contextlib.nullcontext() if last else self.ddp.no_sync()
            with sync_context:
                with self.phases(Phase.FORWARD), self.autocast():
                    loss = self.workload.loss(call_model(self.forward_module, x), y)
                with self.phases(Phase.BACKWARD):
                    self.precision.backward(loss * (weight * size / n_local))
            total = total + loss.detach() * (size / n_local)
        with self.phases(Phase.OPTIMIZER):
            self.precision.step(self.optimizers())
        return total

    def module(self) -> Any:
        return self.ddp.module

    def compute_only_share(self, twin: Any) -> list[Any]:
        return list(twin.parameters())  # every rank steps every parameter

    def numerics(self) -> str:
        # The fp16 / bf16 compression hooks round every gradient to that dtype before averaging.
        hook = self.spec.options.comm_hook
        return coarsest_precision(super().numerics(), hook) if hook in ("fp16", "bf16") else super().numerics()

    def collective_plan(self) -> list[Any] | None:
        hook = self.spec.options.comm_hook
        if hook == "powersgd":
            return None  # low-rank factors whose sizes PowerSGD chooses as it runs
        return ddp_collectives(
            self.ddp.module,
            bucket_cap_mb=self.spec.options.bucket_cap_mb,
            comm_dtype=hook,
            broadcast_buffers=self.spec.options.broadcast_buffers,
        )


def ddp_buckets(bucket_cap_mb: float | None) -> BucketSync:
    """DDP's gradient buckets: a small first one, then ``bucket_cap_mb`` (None: DDP's 25) each,
    each all-reduced as soon as backward has made it ready."""
    cap = int(float(bucket_cap_mb or _DEFAULT_BUCKET_CAP_MB) * (1 << 20))
    return BucketSync(first_bytes=_FIRST_BUCKET_BYTES, cap_bytes=cap, overlap=True)


def ddp_collectives(
    module: Any, *, bucket_cap_mb: float | None, comm_dtype: str | None, broadcast_buffers: bool
) -> list[Any]:
    """DDP's step: one all-reduce per gradient bucket (reverse parameter order, DDP's caps) and,
    with ``broadcast_buffers``, one broadcast of the buffers per dtype (torch flattens them by dtype)
    once per step, however many micro-batches it has."""
    from dpbench.strategies.profiling import Collective

    params = [p for p in module.parameters() if p.requires_grad]
    cap = int((bucket_cap_mb or _DEFAULT_BUCKET_CAP_MB) * 1024 * 1024)
    plan: list[Collective] = []
    numel = nbytes = 0
    dtype = None
    for p in reversed(params):
        limit = _FIRST_BUCKET_BYTES if not plan else cap
        name = _COMM_DTYPES.get(comm_dtype or "", str(p.dtype).replace("torch.", ""))
        if numel and (nbytes + p.numel() * p.element_size() > limit or name != dtype):
            plan.append(Collective(op="all_reduce", numel=numel, dtype=dtype))
            numel = nbytes = 0
        numel += p.numel()
        nbytes += p.numel() * p.element_size()
        dtype = name
    if numel:
        plan.append(Collective(op="all_reduce", numel=numel, dtype=dtype))
    buffers: dict[str, int] = {}
    for b in module.buffers():
        key = str(b.dtype).replace("torch.", "")
        buffers[key] = buffers.get(key, 0) + b.numel()
    if broadcast_buffers:
        # DDP syncs buffers before a forward only when the forward before it synced gradients
        # (require_forward_param_sync): under no_sync() the first micro-batch broadcasts, the rest do not.
        plan += [Collective(op="broadcast", numel=n, dtype=d) for d, n in buffers.items() if n]
    return plan


def _cuda_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0
