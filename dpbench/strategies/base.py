"""The Strategy interface: how replicas are made and how their gradients are synchronised.

A strategy class has two sides:

* parent side (class methods, no process started, CUDA never initialised):
  :meth:`Strategy.parse_options` checks the user's options and :meth:`Strategy.placement`
  says how many worker processes to start, on which devices, with which backend;
* worker side (an instance, built inside a spawned worker): :meth:`setup` builds the
  model(s) and :meth:`train_step` runs one SGD step on the batch it is given. The shared
  loop :meth:`run_steps` does the timing, device synchronisation, loss and memory
  bookkeeping so every strategy is measured the same way.

Batch split (identical for every strategy): the global batch of N samples is cut into
``world_size`` contiguous slices, the first ``N % W`` one sample larger
(:func:`split_sizes`). Multi-process strategies receive only their rank's slice and weight
the local mean loss by ``n_local * W / N`` so that the averaged gradient equals the
gradient of the global-batch mean loss even when N is not divisible by W.
"""

from __future__ import annotations

import resource
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar

from dpbench.strategies._options import CommonOptions
from dpbench.strategies._precision import Precision
from dpbench.strategies._timing import PhaseTimer
from dpbench.strategies.errors import StrategyUnavailable
from dpbench.strategies.schedule import StepSchedule

__all__ = [
    "Strategy",
    "StrategyUnavailable",
    "RunSpec",
    "Placement",
    "split_sizes",
    "take_slice",
    "to_device",
    "stage",
    "call_model",
    "optimizer_class",
    "optimizer_state_tensors",
]


@dataclass(kw_only=True, frozen=True)
class Placement:
    """How the launcher starts a strategy: processes, devices and threads."""

    processes: int  # worker processes (1 for in-process strategies)
    backend: str | None  # torch.distributed backend; None = no process group
    devices: tuple[str, ...]  # the device of each replica, e.g. ("cpu", "cpu") or ("cuda:0", "cuda:1")
    concurrent_replicas: int  # replicas computing at the same time on the CPU (sets default threads)


@dataclass(kw_only=True, frozen=True)
class RunSpec:
    """Everything a worker needs to build and train its part of a run (picklable)."""

    strategy: str
    options: CommonOptions  # the strategy's own options dataclass, checked in the parent
    world_size: int
    global_batch: int
    per_replica_batch: tuple[int, ...]
    device_type: str
    devices: tuple[str, ...]
    backend: str | None
    seed: int
    lr: float
    threads_per_worker: int


def split_sizes(n: int, parts: int) -> list[int]:
    """Contiguous split of ``n`` samples into ``parts`` slices, the first ``n % parts`` larger."""
    base, extra = divmod(n, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def take_slice(obj: Any, start: int, length: int) -> Any:
    """Rows ``[start, start + length)`` along dim 0 of every tensor in ``obj`` (tuples/lists/dicts walked)."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.narrow(0, start, length)
    if isinstance(obj, (tuple, list)):
        return type(obj)(take_slice(item, start, length) for item in obj)
    if isinstance(obj, dict):
        return {key: take_slice(value, start, length) for key, value in obj.items()}
    return obj


def to_device(obj: Any, device: Any) -> Any:
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, (tuple, list)):
        return type(obj)(to_device(item, device) for item in obj)
    if isinstance(obj, dict):
        return {key: to_device(value, device) for key, value in obj.items()}
    return obj


def stage(obj: Any, device: Any) -> Any:
    """``obj``'s CPU tensors on CUDA ``device``: pinned, then copied with ``non_blocking=True``.

    A copy from pageable memory blocks the host until it is done (a host sync, and after
    queued work also a wait for that work); from pinned memory it is queued like a kernel.
    The caller synchronises before its clock starts (see :meth:`Strategy.run_steps`).
    """
    import torch

    if isinstance(obj, torch.Tensor):
        if obj.device.type == "cuda":
            return obj.to(device, non_blocking=True)
        return obj.pin_memory().to(device, non_blocking=True)
    if isinstance(obj, (tuple, list)):
        return type(obj)(stage(item, device) for item in obj)
    if isinstance(obj, dict):
        return {key: stage(value, device) for key, value in obj.items()}
    return obj


def call_model(model: Any, inputs: Any) -> Any:
    """Inputs may be one tensor or a tuple of positional arguments (see ``Workload``)."""
    if isinstance(inputs, tuple):
        return model(*inputs)
    return model(inputs)


class _OptionDefaults:
    """``Strategy.option_defaults``: derived from ``options_type`` whenever it is read, so the two
    cannot disagree; a read-only mapping, since a default is changed in the dataclass."""

    def __get__(self, instance: Any, owner: type[Strategy]) -> MappingProxyType[str, Any]:
        return MappingProxyType(owner.options_type().as_dict())


class Strategy(ABC):
    """One data-parallel strategy. Subclasses live one per file in ``dpbench.strategies``.

    Each declares its options as a frozen dataclass (``options_type``, extending
    :class:`~dpbench.strategies._options.CommonOptions`: every strategy also takes ``optimizer``
    and ``precision``); the parent parses and checks them once (:meth:`parse_options`) and every method, parent
    side and worker side, reads that dataclass; saved results record its ``as_dict()``.
    """

    name: ClassVar[str]
    # Known options, their defaults, docs and checks; anything else is rejected before a process starts.
    options_type: ClassVar[type[CommonOptions]] = CommonOptions
    # options_type's defaults, in the resolved dict's order (read-only, computed on each access).
    option_defaults = _OptionDefaults()
    # True when every rank is its own process that receives only its slice of the batch.
    multiprocess: ClassVar[bool] = False
    # Why a profiler trace of this strategy would not mean what it says (None: traceable);
    # see strategies/tracing.py.
    trace_unavailable: ClassVar[str | None] = None

    # -- parent side -----------------------------------------------------------------
    @classmethod
    def parse_options(
        cls, options: Mapping[str, Any], *, device: str, world_size: int, global_batch: int
    ) -> CommonOptions:
        """``options`` (the names a user set) as ``options_type``, checked (see :meth:`CommonOptions.parse`):
        the value the other class methods and the workers (``RunSpec.options``) read."""
        return cls.options_type.parse(options, device=device, world_size=world_size, global_batch=global_batch)

    @classmethod
    def resolve_options(
        cls, options: Mapping[str, Any], *, device: str, world_size: int, global_batch: int
    ) -> dict[str, Any]:
        """:meth:`parse_options` as the plain dict saved results record, in ``option_defaults``' order."""
        return cls.parse_options(options, device=device, world_size=world_size, global_batch=global_batch).as_dict()

    @classmethod
    @abstractmethod
    def placement(cls, *, world_size: int, device: str, options: CommonOptions) -> Placement:
        """Processes, backend and devices for this strategy; raise StrategyUnavailable if impossible."""

    @classmethod
    def per_replica_batch(cls, global_batch: int, world_size: int, options: CommonOptions) -> list[int]:
        return split_sizes(global_batch, world_size)

    @classmethod
    def memory_estimate(cls, params: Any, *, world_size: int, options: CommonOptions) -> list[Any]:
        """Per worker process: the :class:`~dpbench.strategies.memory.StateMemory` it holds between
        steps, from the meta model's :class:`~dpbench.strategies.memory.ParamShape` s (parent side)."""
        from dpbench.strategies.memory import full_state

        return [full_state(params, options.optimizer)] * (world_size if cls.multiprocess else 1)

    @classmethod
    def peak_estimate(
        cls, state: Any, *, params: Any, activation: Any, batch: int, world_size: int, options: CommonOptions
    ) -> int:
        """One worker's peak: what it holds plus ``activation(batch)``, what one forward + backward of
        its ``batch`` samples holds at its peak beyond the gradients (activations, temporaries)."""
        return state.held_bytes() + activation(batch)

    @classmethod
    def collective_timeout(cls, options: CommonOptions, *, timeout: float) -> float:
        """How long a rank may wait in one collective for the others, given the run's ``timeout``
        (how long a rank may stay silent): ``timeout``, or with ``compile`` on as long as a cold
        compile may take and then some — in the warm-up step a rank that compiled first waits in
        the first collective for the slowest one (see :mod:`dpbench.strategies._compile`)."""
        if getattr(options, "compile", False):
            from dpbench.strategies._compile import COMPILE_TIMEOUT_S

            return timeout + COMPILE_TIMEOUT_S
        return timeout

    @classmethod
    def step_schedule(cls, options: CommonOptions) -> StepSchedule | None:
        """What one step issues (:class:`~dpbench.strategies.schedule.StepSchedule`: its collectives,
        buckets or units, what it shards and broadcasts), for the step model to replay (parent side,
        torch-free); None: no schedule to replay (one process holding every replica)."""
        return None

    # -- worker side -----------------------------------------------------------------
    def __init__(self, spec: RunSpec, workload: Any, ctx: Any):
        self.spec = spec
        self.workload = workload
        self.ctx = ctx  # dpbench.launcher.WorkerContext: rank, world_size, device, group
        self.rank = ctx.rank
        self._step = 0
        self.compile_time_s: float | None = None
        self.timed_peak: dict[str, int] = {}  # peak memory seen by run_steps (see case metrics)
        self.cuda_devices = sorted({d for d in self.local_devices() if d.startswith("cuda")})
        self.phases = PhaseTimer(self.cuda_devices)
        self.precision = self.make_precision()

    def local_devices(self) -> list[str]:
        """Devices this worker computes on (one per rank, or all replicas in-process)."""
        if self.multiprocess:
            return [str(self.ctx.device)]
        return list(self.spec.devices)

    def build_model(self) -> Any:
        """Seed, then build: every rank and replica starts from the same weights."""
        import torch

        torch.manual_seed(self.spec.seed)
        model = self.workload.model()
        if self.spec.options.checkpoint:  # before any wrapping: the strategy shards or copies the checkpointed blocks
            from dpbench.strategies.checkpointing import checkpoint_blocks

            checkpoint_blocks(model, self.workload.blocks)
        return model

    def make_precision(self) -> Precision:
        return Precision(self.spec.options.precision, self.spec.device_type)

    def make_optimizer(self, params: Any) -> Any:
        return optimizer_class(self.spec.options.optimizer)(params, lr=self.spec.lr)

    def optimizers(self) -> list[Any]:
        """The optimizers this worker steps (one for most strategies, one per replica for manual)."""
        return [self.optimizer]

    def autocast(self) -> Any:
        """Wrap forward and loss in this: autocast for ``precision`` bf16/fp16, nothing for fp32."""
        return self.precision.autocast()

    def backward_and_update(self, loss: Any) -> Any:
        """The tail every one-optimizer strategy shares: backward, then the optimizer step, each timed."""
        from dpbench.schema import Phase

        with self.phases(Phase.BACKWARD):
            self.precision.backward(loss)
        with self.phases(Phase.OPTIMIZER):
            self.precision.step(self.optimizers())
        return loss.detach()

    def maybe_compile(self, module: Any) -> Any:
        """``torch.compile(module)`` when the strategy's ``compile`` option is on, else ``module``."""
        if not getattr(self.spec.options, "compile", False):
            return module
        from dpbench.strategies._compile import compile_module

        compiled, self._wrap_s = compile_module(module)
        return compiled

    def warm_up_compiled(self) -> None:
        """Compile outside every timed region (see :func:`dpbench.strategies._compile.warm_up`)."""
        if getattr(self.spec.options, "compile", False):
            from dpbench.strategies._compile import warm_up

            with self.compiling():
                self.compile_time_s = getattr(self, "_wrap_s", 0.0) + warm_up(self)

    def compiling(self) -> Any:
        """Wrap work that may compile (the first call of a compiled module) in this: the worker beats
        for up to ``COMPILE_TIMEOUT_S`` meanwhile (``ctx.keep_alive``), so a cold compile, or a wait
        in a collective for another rank's, is not taken for a hang. Nothing without ``compile``."""
        import contextlib

        keep_alive = getattr(self.ctx, "keep_alive", None)
        if not getattr(self.spec.options, "compile", False) or keep_alive is None:
            return contextlib.nullcontext()
        from dpbench.strategies._compile import COMPILE_TIMEOUT_S

        return keep_alive(COMPILE_TIMEOUT_S)

    @abstractmethod
    def setup(self) -> None:
        """Build model replicas and optimizers on the worker's devices."""

    @abstractmethod
    def train_step(self, inputs: Any, target: Any) -> Any:
        """One optimizer step on the CPU batch given; return the (detached) mean loss of that batch.

        Multi-process strategies receive their rank's slice; in-process ones the global batch.
        Record phases with ``with self.phases(Phase.X):``; run forward and loss under
        ``with self.autocast():``.
        """

    @abstractmethod
    def module(self) -> Any:
        """The trained ``nn.Module`` of this rank (replica 0 for in-process strategies)."""

    def close(self) -> None:  # noqa: B027 - optional: most strategies hold nothing to release
        """Release threads or other resources held by the strategy."""

    def full_parameters(self) -> Any:
        """``(name, full tensor)`` of every parameter of this rank's model, one at a time, in the
        module's order. Called on every rank: sharded strategies override it to gather each
        parameter (a collective every rank joins, in the same order) only as it is consumed."""
        for name, p in self.module().named_parameters():
            yield name, p.detach()

    def parameters(self) -> dict[str, Any]:
        """Called on every rank (sharded strategies gather here); the parent keeps rank 0's."""
        return {name: p.cpu().clone() for name, p in self.full_parameters()}

    def fingerprint(self) -> dict[str, Any]:
        """This rank's view of the model, reduced the same way under every strategy
        (:mod:`dpbench.strategies.fingerprint`): the float64 parameter sums, the step count they
        follow, the precision the steps computed in, and why a stateful workload is exempt (or None)."""
        from dpbench.strategies.fingerprint import stateful_reason

        return {
            "step": self._step,
            **self.fingerprint_sums(),
            "precision": self.numerics(),
            "exempt": stateful_reason(self.module(), stateful=bool(getattr(self.workload, "stateful", False))),
        }

    def fingerprint_sums(self) -> dict[str, Any]:
        """float64 Σp, Σ|p|, Σp² and the element count over this rank's full parameters
        (:func:`dpbench.strategies.fingerprint.parameter_sums`). A sharded strategy may add up its
        ranks' shards instead of gathering them: the same sums, added in another order."""
        from dpbench.strategies.fingerprint import parameter_sums

        return parameter_sums(self.full_parameters())

    def numerics(self) -> str:
        """The coarsest precision anything in a step rounds to ("fp32", "bf16", "fp16"): which
        tolerance a comparison with ``single`` allows. The matmuls' dtype unless a strategy rounds
        more (a compressing gradient hook)."""
        return self.compute_dtype()

    def buffers(self) -> dict[str, Any]:
        return {name: b.detach().cpu().clone() for name, b in self.module().named_buffers()}

    def local_batch(self, step: int) -> tuple[Any, Any]:
        """Step ``step``'s batch as this worker trains on it: the rank's slice, or all of it in-process."""
        spec = self.spec
        inputs, target = self.workload.batch(step, spec.global_batch, spec.seed)
        if self.multiprocess:
            sizes = list(spec.per_replica_batch)
            start = sum(sizes[: self.rank])
            inputs = take_slice(inputs, start, sizes[self.rank])
            target = take_slice(target, start, sizes[self.rank])
        return inputs, target

    def staged_batch(self, step: int) -> tuple[Any, Any]:
        """Step ``step``'s batch as a step receives it: this worker's part (:meth:`local_batch`) on
        its first device (:meth:`stage_batch`). The timed steps and the compile warm-up both take
        it from here: a strategy whose ``train_step`` relies on the staging (ddp moves no target)
        would otherwise meet a host tensor in the warm-up only, and only on CUDA."""
        return self.stage_batch(*self.local_batch(step))

    def stage_batch(self, inputs: Any, target: Any) -> tuple[Any, Any]:
        """The batch this worker trains on, moved to its first device before the step's clock
        starts (the rank's device; replica 0's for in-process strategies, which scatter from
        there as torch's DataParallel does from ``device_ids[0]``). CPU: unchanged."""
        device = self.local_devices()[0]
        if not str(device).startswith("cuda"):
            return inputs, target
        return stage(inputs, device), stage(target, device)

    def run_steps(self, k: int, heartbeat: Any = None, on_step: Any = None) -> dict[str, Any]:
        """Run ``k`` timed steps; return this rank's raw measurements for the parent to reduce.

        ``on_step()`` is called after each step, once its clock has stopped (the profiler's
        ``prof.step()`` when tracing)."""
        import torch

        spec = self.spec
        for device in self.cuda_devices:
            torch.cuda.reset_peak_memory_stats(device)
        self.phases.clear()
        times: list[float] = []
        losses = []
        skipped: list[int] = []  # steps of this call whose update the loss scaler skipped
        # Minor page faults over the k steps (this process, every thread), read outside the clocks:
        # memory the C library gave back and the next step touches again costs a fault per page,
        # and how much that is depends on the process (see minor_faults in StepStats).
        faults_before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for index in range(k):
            # Host → device copy of the batch outside the clock: a step measures the training
            # work, not the data loading (a pageable copy inside it would be a host sync).
            inputs, target = self.staged_batch(self._step)
            # Start from an idle device (copy done) so earlier work is not charged to this step.
            self.phases.sync()
            skipped_before = self.precision.skipped
            t0 = time.perf_counter()
            loss = self.train_step(inputs, target)
            # Stop the clock only when the device has finished this step's work.
            self.phases.sync()
            times.append(time.perf_counter() - t0)
            losses.append(loss)
            if self.precision.skipped > skipped_before:
                skipped.append(index)
            self._step += 1
            if on_step is not None:
                on_step()
            if heartbeat is not None:
                heartbeat()
        minor_faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults_before
        # Loss values and CUDA phase events are read after the timed loop (reading either
        # mid-step would synchronise inside the step being timed).
        weight = spec.per_replica_batch[self.rank] / spec.global_batch if self.multiprocess else 1.0
        loss_parts = [float(loss) * weight for loss in losses]
        phases = self.phases.resolve()
        memory = self.peak_memory(self.cuda_devices)
        self._remember_peak()
        return {
            "times": times,
            "loss_parts": loss_parts,
            "skipped_steps": skipped,
            "phases": {name: total / max(1, k) for name, total in phases.items()},
            "memory": memory,
            "minor_faults": minor_faults,
        }

    def peak_memory(self, cuda_devices: list[str]) -> dict[str, int]:
        import torch

        if cuda_devices:
            return {d: int(torch.cuda.max_memory_allocated(d)) for d in cuda_devices}
        # ru_maxrss is KiB on Linux: the worker's lifetime peak resident set.
        return {f"cpu:rank{self.rank}": int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024}

    def _remember_peak(self) -> None:
        """The largest peak of any timed call, kept for the case metrics (read after profiling work)."""
        import torch

        if self.cuda_devices:
            allocated = sum(int(torch.cuda.max_memory_allocated(d)) for d in self.cuda_devices)
            reserved = sum(int(torch.cuda.max_memory_reserved(d)) for d in self.cuda_devices)
            current = {"peak_bytes": allocated, "peak_reserved_bytes": reserved}
        else:
            current = {"peak_bytes": int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024}
        for key, value in current.items():
            self.timed_peak[key] = max(self.timed_peak.get(key, 0), value)

    def loss_weight(self) -> float:
        """Multiply the local mean loss by this so DDP-style averaging yields the global mean."""
        sizes = self.spec.per_replica_batch
        return sizes[self.rank] * self.spec.world_size / self.spec.global_batch

    # -- case metrics (untimed; see dpbench.strategies.profiling) -------------------------
    def memory_tensors(self) -> dict[str, list[Any]]:
        """The tensors this worker holds: parameters, gradients and optimizer state."""
        params = [p for p in self.module().parameters()]
        grads = [p.grad for p in params if p.grad is not None]
        return {"params": params, "grads": grads, "optimizer_state": optimizer_state_tensors(self.optimizers())}

    def compute_only_share(self, twin: Any) -> list[Any] | None:
        """What the rank's optimizer steps, on the unsynchronised twin (see _profiling); None = not measured.

        Strategies that synchronise gradients through collectives (ddp, zero, fsdp) override it.
        """
        return None

    def twin_module(self, model: Any) -> Any:
        """A fresh model as this strategy computes with it (FSDP casts to its param dtype)."""
        return model

    def compute_dtype(self) -> str:
        """The dtype the matmuls run in ("fp32", "bf16", "fp16"): which peak FLOP/s applies."""
        return self.spec.options.precision

    def collective_plan(self) -> list[Any] | None:
        """The collectives one step issues (:class:`dpbench.strategies.profiling.Collective`); None = unknown."""
        return None

    def replica_concurrency(self) -> str | None:
        """One line when this worker's replicas share a GPU and so run one after another; else None.

        In-process replicas (dp, manual) on one GPU issue their kernels on the caller's stream: the
        device runs them serially, so the step measures the strategy's overhead, not concurrency.
        """
        devices = self.spec.devices
        shared = sorted({d for d in devices if d.startswith("cuda") and devices.count(d) > 1})
        if self.multiprocess or not shared:
            return None
        return (
            f"serial: {len(devices)} replicas share {', '.join(shared)} on one stream, so they run one after "
            "another (the step time measures overhead, not concurrency)"
        )


def optimizer_class(name: str) -> Any:
    import torch

    return {"sgd": torch.optim.SGD, "adamw": torch.optim.AdamW}[name]


def optimizer_state_tensors(optimizers: list[Any]) -> list[Any]:
    """Every tensor in the optimizers' state (AdamW's moments and step counters; none for plain SGD)."""
    import torch

    out = []
    for optimizer in optimizers:
        for state in optimizer.state.values():
            out += [v for v in state.values() if isinstance(v, torch.Tensor)]
    return out
