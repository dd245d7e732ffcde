"""DataParallel: scatter → replicate → parallel_apply → gather, on CPU or CUDA replicas."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Generic, TypeVar

import torch
from torch import nn

from dpbench.schema import Phase

from ._devices import DeviceLike, check_module_device, parse_device, parse_devices
from .parallel_apply import ReplicaThreads, parallel_apply
from .replicate import replicate
from .scatter_gather import _check_chunk_sizes, _normalize_layout, gather, scatter_kwargs
from .timing import Mark, cuda_indices, mark, span_seconds

__all__ = ["DataParallel", "data_parallel"]

T = TypeVar("T", bound=nn.Module)


def _ensure_nonempty(inputs: tuple, kwargs: tuple) -> tuple[tuple, tuple]:
    # A forward without any inputs still runs once, on device_ids[0] (as torch does).
    if not inputs and not kwargs:
        return ((),), ({},)
    return inputs, kwargs


class DataParallel(nn.Module, Generic[T]):
    """Drop-in ``torch.nn.DataParallel`` that also runs on CPU and with several replicas per device.

    ``device_ids`` accepts ints (CUDA indices), ``"cuda:N"``, ``"cpu"`` or ``torch.device``;
    repeats run several replicas on one device in parallel threads (``["cpu", "cpu"]``).
    ``None`` means every CUDA device, or ``["cpu"]`` without CUDA. Keyword-only extras:
    ``chunk_sizes`` (uneven shares, one per device), ``gather_layout`` (see
    :func:`dpbench.parallel.gather`; when given it is applied even with one device, so the
    output structure does not depend on the device count) and ``record_phases`` (after each
    forward, :attr:`phase_times` holds seconds per phase). Worker threads persist between
    forwards; :meth:`close` or leaving a ``with`` block stops them.

    One device with every input tensor already on it is a fast path: the module is called
    directly (no scatter, no copy, no per-forward device walk); if that call fails, the device
    check runs then, so a module on the wrong device still gets torch's error.
    """

    def __init__(
        self,
        module: T,
        device_ids: Sequence[DeviceLike] | None = None,
        output_device: DeviceLike | None = None,
        dim: int = 0,
        *,
        chunk_sizes: Sequence[int] | None = None,
        gather_layout: str | Mapping[str, str] | None = None,
        record_phases: bool = False,
    ) -> None:
        super().__init__()
        if not isinstance(module, nn.Module):
            raise TypeError(f"module: expected an nn.Module, got {type(module).__name__}")
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise TypeError(f"dim: expected an int, got {dim!r}")
        self.module = module
        self.device_ids = parse_devices(device_ids, argument="device_ids")
        self.output_device = (
            self.device_ids[0]
            if output_device is None
            else parse_device(output_device, argument="output_device", allow_minus_one=True)
        )
        self.src_device_obj = self.device_ids[0]
        self.dim = dim
        if chunk_sizes is not None:
            _check_chunk_sizes(chunk_sizes, len(self.device_ids))
            chunk_sizes = list(chunk_sizes)
        self.chunk_sizes = chunk_sizes
        self.gather_layout = _normalize_layout(gather_layout) or None
        self.record_phases = record_phases
        # (phase, start mark, end mark) of the last forward; see phase_times / phase_spans.
        self.phase_spans: list[tuple[str, Mark, Mark]] = []
        self._threads: ReplicaThreads | None = None
        if len(self.device_ids) == 1:
            self.module.to(self.src_device_obj)  # as torch does: one device means "put it there"

    # --- the pipeline: one-line steps a subclass can override or time -------------------
    def scatter(self, inputs: tuple[Any, ...], kwargs: dict[str, Any] | None, device_ids: Sequence[DeviceLike]) -> Any:
        return scatter_kwargs(inputs, kwargs, device_ids, dim=self.dim, chunk_sizes=self._chunk_sizes_for(device_ids))

    def replicate(self, module: T, device_ids: Sequence[DeviceLike]) -> list[T]:
        return replicate(module, device_ids, not torch.is_grad_enabled())

    def parallel_apply(self, replicas: Sequence[T], inputs: Sequence[Any], kwargs: Any) -> list[Any]:
        if self._threads is None:
            self._threads = ReplicaThreads()
        return parallel_apply(replicas, inputs, kwargs, self.device_ids[: len(replicas)], threads=self._threads)

    def gather(self, outputs: Any, output_device: DeviceLike) -> Any:
        return gather(outputs, output_device, dim=self.dim, layout=self.gather_layout)

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        if (
            len(self.device_ids) == 1
            and self.gather_layout is None
            and _already_on(self.src_device_obj, inputs, kwargs)
        ):
            return self._call_module(inputs, kwargs)
        check_module_device(self.module, self.src_device_obj)
        clock = _PhaseClock(self.device_ids, self.output_device) if self.record_phases else None
        inputs, module_kwargs = _ensure_nonempty(*self.scatter(inputs, kwargs, self.device_ids))
        _tick(clock, Phase.SCATTER)
        if len(self.device_ids) == 1:
            output = self.module(*inputs[0], **module_kwargs[0])
            _tick(clock, Phase.APPLY)
            if self.gather_layout is not None:
                output = self.gather([output], self.output_device)
            _tick(clock, Phase.GATHER)
        else:
            # Labelled for profiler traces; left out of the one-device path, where its ~8 µs
            # would be most of DataParallel's own cost.
            with torch.autograd.profiler.record_function("dpbench.DataParallel.forward"):
                replicas = self.replicate(self.module, self.device_ids[: len(inputs)])
                _tick(clock, Phase.REPLICATE)
                outputs = self.parallel_apply(replicas, inputs, module_kwargs)
                _tick(clock, Phase.APPLY)
                output = self.gather(outputs, self.output_device)
                _tick(clock, Phase.GATHER)
        if clock is not None:
            self.phase_spans = clock.spans
        return output

    def _call_module(self, inputs: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The fast path: one device, inputs already there — the module itself, nothing else."""
        clock = _PhaseClock(self.device_ids, self.output_device) if self.record_phases else None
        try:
            output = self.module(*inputs, **kwargs)
        except RuntimeError:
            # Checked only on failure so the happy path skips the walk over every tensor;
            # a module on the wrong device then gets DataParallel's own error.
            check_module_device(self.module, self.src_device_obj)
            raise
        if clock is not None:
            clock.tick(Phase.APPLY)
            self.phase_spans = clock.spans
        return output

    @property
    def phase_times(self) -> dict[str, float]:
        """Seconds per phase of the last forward (``record_phases=True``).

        On CUDA the phases are CUDA-event spans, so reading this waits for the forward's
        device work; :attr:`phase_spans` holds the raw marks for reading them later. Empty
        when phases are not recorded.
        """
        if not self.phase_spans:
            return {}
        times = {p.value: 0.0 for p in (Phase.SCATTER, Phase.REPLICATE, Phase.APPLY, Phase.GATHER)}
        for phase, start, end in self.phase_spans:
            times[phase] += span_seconds(start, end)
        return times

    def _chunk_sizes_for(self, device_ids: Sequence[DeviceLike]) -> list[int] | None:
        if self.chunk_sizes is None:
            return None
        if len(device_ids) != len(self.chunk_sizes):
            raise ValueError(f"chunk_sizes: expected one size per device ({len(device_ids)}), got {self.chunk_sizes}")
        return self.chunk_sizes

    # --- lifetime of the worker threads ---------------------------------------------------
    def close(self) -> None:
        """Stop the persistent worker threads (a later forward starts new ones)."""
        threads, self._threads = self._threads, None
        if threads is not None:
            threads.close()

    def __enter__(self) -> DataParallel[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # Also covered by ReplicaThreads' finalizer; closing here just makes it prompt.
        threads = self.__dict__.get("_threads")
        if threads is not None:
            threads.close()

    def __getstate__(self) -> dict[str, Any]:
        # Threads and queues cannot be copied or pickled; a copy starts its own on demand.
        state = self.__dict__.copy()
        state["_threads"] = None
        return state

    def extra_repr(self) -> str:
        return f"device_ids={[str(d) for d in self.device_ids]}, output_device={self.output_device}, dim={self.dim}"


class _PhaseClock:
    """Marks phase boundaries without stalling the host (CUDA events on GPUs, see ``timing``)."""

    def __init__(self, devices: Sequence[torch.device], output_device: torch.device):
        self.indices = cuda_indices(list(devices) + [output_device])
        self.spans: list[tuple[str, Mark, Mark]] = []
        self.last = mark(self.indices)

    def tick(self, phase: Phase) -> None:
        now = mark(self.indices)
        self.spans.append((phase.value, self.last, now))
        self.last = now


def _already_on(device: torch.device, inputs: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Every input is a tensor on ``device`` or a plain non-container value (passed as is)."""
    for value in (*inputs, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            if value.device != device:
                return False
        elif isinstance(value, (tuple, list, dict)) or dataclasses.is_dataclass(value):
            return False  # containers take the general path, which walks them
    return True


def _tick(clock: _PhaseClock | None, phase: Phase) -> None:
    if clock is not None:
        clock.tick(phase)


def data_parallel(
    module: nn.Module,
    inputs: Any,
    device_ids: Sequence[DeviceLike] | None = None,
    output_device: DeviceLike | None = None,
    dim: int = 0,
    module_kwargs: dict[str, Any] | None = None,
) -> Any:
    """Functional :class:`DataParallel`: evaluate ``module(*inputs, **module_kwargs)`` across devices.

    Uses temporary threads (no instance to keep persistent ones); ``output_device=-1`` means the CPU.
    """
    if not isinstance(inputs, tuple):
        inputs = (inputs,) if inputs is not None else ()
    devices = parse_devices(device_ids, argument="device_ids")
    out_device = (
        devices[0]
        if output_device is None
        else parse_device(output_device, argument="output_device", allow_minus_one=True)
    )
    check_module_device(module, devices[0])
    if len(devices) == 1 and _already_on(devices[0], inputs, module_kwargs or {}):
        return module(*inputs, **(module_kwargs or {}))
    scattered, kwargs = _ensure_nonempty(*scatter_kwargs(inputs, module_kwargs, devices, dim))
    if len(devices) == 1:
        return module(*scattered[0], **kwargs[0])
    used = devices[: len(scattered)]
    replicas = replicate(module, used, not torch.is_grad_enabled())
    outputs = parallel_apply(replicas, scattered, kwargs, used)
    return gather(outputs, out_device, dim)
