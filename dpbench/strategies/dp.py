"""``dp``: dpbench's own DataParallel (``dpbench.parallel.DataParallel``), in one worker process."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from dpbench.schema import Phase, StrategyName
from dpbench.strategies._options import CommonOptions, is_int_in
from dpbench.strategies.base import Placement, Strategy, call_model, split_sizes, to_device

__all__ = ["DP", "DPOptions"]

_DP_PHASES = (Phase.SCATTER, Phase.REPLICATE, Phase.APPLY, Phase.GATHER)


@dataclass(frozen=True, kw_only=True)
class DPOptions(CommonOptions):
    """``dp``'s options: how the batch is split and how replicas share GPUs."""

    strategy = StrategyName.DP.value

    chunk_sizes: list[int] | tuple[int, ...] | None = None
    """Samples per replica, summing to ``global_batch`` (None: the split every strategy uses)."""

    replicas_per_device: int | None = None
    """CUDA: replicas sharing one GPU (None: as few as fit, ceil(world_size / GPUs)); ignored on CPU."""

    def check(self, *, device: str, world_size: int, global_batch: int) -> None:
        super().check(device=device, world_size=world_size, global_batch=global_batch)
        sizes = self.chunk_sizes
        if sizes is not None:
            ok = isinstance(sizes, (list, tuple)) and all(is_int_in(size, 1) for size in sizes)
            if not ok or len(sizes) != world_size or sum(sizes) != global_batch:
                raise ValueError(
                    f"dp option chunk_sizes must be {world_size} positive ints summing to global_batch="
                    f"{global_batch}, got {sizes!r}"
                )
        per_device = self.replicas_per_device
        if per_device is not None and not is_int_in(per_device, 1):
            raise ValueError(f"dp option replicas_per_device must be None or an int >= 1, got {per_device!r}")


class DP(Strategy):
    """Scatter → replicate → parallel_apply → gather every step, replicas as threads in one process.

    On CPU the ``world_size`` replicas all live on ``"cpu"`` and run in parallel threads, so
    the default intra-op threads per replica is cores // world_size (``torch.set_num_threads``
    is per process; every replica thread gets its own intra-op team). On CUDA, replica r
    goes to ``cuda:(r // replicas_per_device)``.

    Options: :class:`DPOptions`.

    The loss is computed once on the gathered output, so the gradient is the global-batch
    mean gradient with no weighting. BatchNorm: each replica normalises with its own
    slice's statistics (as torch.nn.DataParallel); running statistics are those written by
    the replica sharing storage with the module (replica 0).
    Phases: scatter (incl. moving the target), replicate, apply (forward on every replica),
    gather (incl. the loss on the output device), backward, optimizer.
    """

    name = StrategyName.DP.value
    # The replicas are concurrent threads of one process: the trace records their ops by thread, and
    # nothing ties a thread to a replica, so a per-rank breakdown (and a skew) would be invented.
    trace_unavailable = (
        "its replicas run as threads of one worker process, which the profiler cannot attribute to ranks"
    )
    options_type = DPOptions

    @classmethod
    def placement(cls, *, world_size: int, device: str, options: DPOptions) -> Placement:
        if device == "cuda":
            import torch

            count = torch.cuda.device_count()
            # Default: spread the replicas over every GPU, sharing GPUs only when there are more
            # replicas than GPUs (e.g. two replicas on a single-GPU machine).
            per_device = options.replicas_per_device or max(1, math.ceil(world_size / max(count, 1)))
            needed = math.ceil(world_size / per_device)
            if needed > count:
                raise ValueError(
                    f"dp with world_size={world_size} and replicas_per_device={per_device} needs {needed} CUDA "
                    f"devices, found {count}; raise replicas_per_device or lower world_size"
                )
            devices = tuple(f"cuda:{r // per_device}" for r in range(world_size))
        else:
            devices = ("cpu",) * world_size
        return Placement(processes=1, backend=None, devices=devices, concurrent_replicas=world_size)

    @classmethod
    def peak_estimate(
        cls, state: Any, *, params: Any, activation: Any, batch: int, world_size: int, options: DPOptions
    ) -> int:
        """The module's state, the step's replicas of the parameters and every slice's activations at once."""
        return state.held_bytes() + (world_size - 1) * state.params_bytes + activation(batch)

    @classmethod
    def per_replica_batch(cls, global_batch: int, world_size: int, options: DPOptions) -> list[int]:
        sizes = options.chunk_sizes
        return list(sizes) if sizes is not None else split_sizes(global_batch, world_size)

    def setup(self) -> None:
        from dpbench.parallel import DataParallel

        self.output_device = self.spec.devices[0]
        self.model = self.build_model().to(self.output_device)
        self.dp = DataParallel(
            self.model,
            device_ids=list(self.spec.devices),
            output_device=self.output_device,
            chunk_sizes=list(self.spec.per_replica_batch),
            record_phases=True,
        )
        # The replica threads live as long as the worker; stop them when it shuts down.
        self.ctx.at_close(self.dp.close)
        self.optimizer = self.make_optimizer(self.model.parameters())

    def train_step(self, inputs: Any, target: Any) -> Any:
        self.optimizer.zero_grad(set_to_none=True)
        with self.phases(Phase.SCATTER):
            target = to_device(target, self.output_device)
        with self.autocast():  # parallel_apply carries it into every replica thread
            output = call_model(self.dp, inputs)
        # Marks, not seconds: on CUDA they are events, read after the timed loop.
        self.phases.add_spans(self.dp.phase_spans)
        for phase in _DP_PHASES:  # one device skips replicate; report every phase all the same
            self.phases.add(phase, 0.0)
        with self.phases(Phase.GATHER), self.autocast():
            loss = self.workload.loss(output, target)
        return self.backward_and_update(loss)

    def module(self) -> Any:
        return self.model
