"""The Strategy interface: how replicas are made and how their gradients are synchronised.

A strategy class has two sides:

* parent side (class methods, no process started, CUDA never initialised):
  :meth:`Strategy.resolve_options` checks the user's options and :meth:`Strategy.placement`
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
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, Iterator

__all__ = [
    "Strategy",
    "StrategyUnavailable",
    "RunSpec",
    "Placement",
    "split_sizes",
    "take_slice",
    "to_device",
    "call_model",
]


class StrategyUnavailable(RuntimeError):
    """The strategy cannot run here (e.g. torch-dp without CUDA); ``reason`` says why.

    Suites turn this into ``pytest.skip(exc.reason)``.
    """

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


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
    options: dict[str, Any]
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


def call_model(model: Any, inputs: Any) -> Any:
    """Inputs may be one tensor or a tuple of positional arguments (see ``Workload``)."""
    if isinstance(inputs, tuple):
        return model(*inputs)
    return model(inputs)


class PhaseTimer:
    """Accumulates seconds per phase; synchronises CUDA at each boundary."""

    def __init__(self, cuda_devices: list[Any]):
        self._cuda_devices = cuda_devices
        self.totals: dict[str, float] = {}

    def sync(self) -> None:
        import torch

        # CUDA kernels run asynchronously: without this the clock would measure only the
        # launches, and work of one phase would be charged to the next.
        for device in self._cuda_devices:
            torch.cuda.synchronize(device)

    @contextmanager
    def __call__(self, phase: Any) -> Iterator[None]:
        self.sync()
        start = time.perf_counter()
        try:
            yield
        finally:
            self.sync()
            self.add(phase, time.perf_counter() - start)

    def add(self, phase: Any, seconds: float) -> None:
        key = getattr(phase, "value", phase)
        self.totals[key] = self.totals.get(key, 0.0) + seconds


class Strategy(ABC):
    """One data-parallel strategy. Subclasses live one per file in ``dpbench.strategies``."""

    name: ClassVar[str]
    # Known options and their defaults; anything else is rejected before a process starts.
    option_defaults: ClassVar[dict[str, Any]] = {}
    # True when every rank is its own process that receives only its slice of the batch.
    multiprocess: ClassVar[bool] = False

    # -- parent side -----------------------------------------------------------------
    @classmethod
    def resolve_options(cls, options: dict[str, Any], *, device: str, world_size: int,
                        global_batch: int) -> dict[str, Any]:
        """Defaults merged with ``options``; unknown names and bad values raise ``ValueError``."""
        unknown = sorted(set(options) - set(cls.option_defaults))
        if unknown:
            known = ", ".join(sorted(cls.option_defaults)) or "(none)"
            raise ValueError(
                f"Unknown option(s) {', '.join(map(repr, unknown))} for strategy {cls.name!r}. "
                f"Known options: {known}"
            )
        resolved = {**cls.option_defaults, **options}
        cls.check_options(resolved, device=device, world_size=world_size, global_batch=global_batch)
        return resolved

    @classmethod
    def check_options(cls, options: dict[str, Any], *, device: str, world_size: int,
                      global_batch: int) -> None:
        """Validate option values; raise ``ValueError`` or :class:`StrategyUnavailable`."""

    @classmethod
    @abstractmethod
    def placement(cls, *, world_size: int, device: str, options: dict[str, Any]) -> Placement:
        """Processes, backend and devices for this strategy; raise StrategyUnavailable if impossible."""

    @classmethod
    def per_replica_batch(cls, global_batch: int, world_size: int, options: dict[str, Any]) -> list[int]:
        return split_sizes(global_batch, world_size)

    # -- worker side -----------------------------------------------------------------
    def __init__(self, spec: RunSpec, workload: Any, ctx: Any):
        self.spec = spec
        self.workload = workload
        self.ctx = ctx  # dpbench.launcher.WorkerContext: rank, world_size, device, group
        self.rank = ctx.rank
        self._step = 0
        cuda = [d for d in self.local_devices() if d.startswith("cuda")]
        self.phases = PhaseTimer(sorted(set(cuda)))

    def local_devices(self) -> list[str]:
        """Devices this worker computes on (one per rank, or all replicas in-process)."""
        if self.multiprocess:
            return [str(self.ctx.device)]
        return list(self.spec.devices)

    def build_model(self) -> Any:
        """Seed, then build: every rank and replica starts from the same weights."""
        import torch

        torch.manual_seed(self.spec.seed)
        return self.workload.model()

    def make_optimizer(self, params: Any) -> Any:
        import torch

        return torch.optim.SGD(params, lr=self.spec.lr)

    def backward_and_update(self, loss: Any) -> Any:
        """The tail every one-optimizer strategy shares: backward, then the SGD step, each timed."""
        from dpbench.schema import Phase

        with self.phases(Phase.BACKWARD):
            loss.backward()
        with self.phases(Phase.OPTIMIZER):
            self.optimizer.step()
        return loss.detach()

    @abstractmethod
    def setup(self) -> None:
        """Build model replicas and optimizers on the worker's devices."""

    @abstractmethod
    def train_step(self, inputs: Any, target: Any) -> Any:
        """One SGD step on the CPU batch given; return the (detached) mean loss of that batch.

        Multi-process strategies receive their rank's slice; in-process ones the global batch.
        Record phases with ``with self.phases(Phase.X):``.
        """

    @abstractmethod
    def module(self) -> Any:
        """The trained ``nn.Module`` of this rank (replica 0 for in-process strategies)."""

    def close(self) -> None:
        """Release threads or other resources held by the strategy."""

    def parameters(self) -> dict[str, Any]:
        return {name: p.detach().cpu().clone() for name, p in self.module().named_parameters()}

    def buffers(self) -> dict[str, Any]:
        return {name: b.detach().cpu().clone() for name, b in self.module().named_buffers()}

    def run_steps(self, k: int, heartbeat: Any = None) -> dict[str, Any]:
        """Run ``k`` timed steps; return this rank's raw measurements for the parent to reduce."""
        import torch

        spec = self.spec
        sizes = list(spec.per_replica_batch)
        start = sum(sizes[: self.rank])
        cuda_devices = sorted({d for d in self.local_devices() if d.startswith("cuda")})
        for device in cuda_devices:
            torch.cuda.reset_peak_memory_stats(device)
        self.phases.totals.clear()
        times: list[float] = []
        losses = []
        for _ in range(k):
            inputs, target = self.workload.batch(self._step, spec.global_batch, spec.seed)
            if self.multiprocess:
                inputs = take_slice(inputs, start, sizes[self.rank])
                target = take_slice(target, start, sizes[self.rank])
            # Start from an idle device so earlier work is not charged to this step.
            self.phases.sync()
            t0 = time.perf_counter()
            loss = self.train_step(inputs, target)
            # Stop the clock only when the device has finished this step's work.
            self.phases.sync()
            times.append(time.perf_counter() - t0)
            losses.append(loss)
            self._step += 1
            if heartbeat is not None:
                heartbeat()
        # Loss values are read after the timed loop (``.item()`` would sync mid-step).
        weight = sizes[self.rank] / spec.global_batch if self.multiprocess else 1.0
        loss_parts = [float(loss) * weight for loss in losses]
        return {
            "times": times,
            "loss_parts": loss_parts,
            "phases": {name: total / max(1, k) for name, total in self.phases.totals.items()},
            "memory": self.peak_memory(cuda_devices),
        }

    def peak_memory(self, cuda_devices: list[str]) -> dict[str, int]:
        import torch

        if cuda_devices:
            return {d: int(torch.cuda.max_memory_allocated(d)) for d in cuda_devices}
        # ru_maxrss is KiB on Linux: the worker's lifetime peak resident set.
        return {f"cpu:rank{self.rank}": int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024}

    def loss_weight(self) -> float:
        """Multiply the local mean loss by this so DDP-style averaging yields the global mean."""
        sizes = self.spec.per_replica_batch
        return sizes[self.rank] * self.spec.world_size / self.spec.global_batch

