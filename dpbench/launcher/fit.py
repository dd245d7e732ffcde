"""Will it fit? Checked in the parent before any worker starts (:func:`check_fits`).

The case's estimate (:class:`dpbench.strategies.estimate.Estimator`) is compared with the memory
free where its workers would run: each GPU's free memory read through NVML (never through
``torch.cuda``, which would initialise CUDA in the parent) against the sum of the workers placed
on it; on a CPU the host's available RAM (psutil) against the sum of every worker, since the
ranks of one host share it. A case that does not fit raises :class:`DoesNotFit` (a
``StrategyUnavailable``: the suites skip it with the reason) instead of crashing out of memory.

On a GPU the estimate counts CUDA's library workspaces of the device's compute capability (read
through NVML, :mod:`dpbench.strategies.workspaces`), and the device must also hold a
:class:`Headroom` that no estimate sees: each worker's CUDA context, NCCL's buffers and the
allocator's fragmentation. The host's RAM on a CPU is compared with the estimate alone.

Environment (the pytest plugin's ``--dpbench-device-memory`` and
``--dpbench-ignore-memory-estimate`` set the first two):

* ``DPBENCH_DEVICE_MEMORY=SIZE`` — the memory of each device (each GPU; the host's RAM on CPU)
  instead of what is free now ("80GB", "80 GiB", "8e10");
* ``DPBENCH_IGNORE_MEMORY_ESTIMATE=1`` — launch whatever the estimate says;
* ``DPBENCH_MEMORY_ESTIMATE=state|peak`` — compare what the workers hold between steps (the
  default for ``dpbench.launch``: exact and instant) or the estimated peak with the forward +
  backward's activations (the suites' default: it builds the model under ``FakeTensorMode``
  once per workload, seconds the first time).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dpbench.strategies import CommonOptions
from dpbench.strategies.errors import StrategyUnavailable

__all__ = [
    "DoesNotFit",
    "Headroom",
    "CUDA_HEADROOM",
    "check_fits",
    "free_memory",
    "gpu_capability",
    "ENV_DEVICE_MEMORY",
    "ENV_IGNORE",
    "ENV_MODE",
]

ENV_DEVICE_MEMORY = "DPBENCH_DEVICE_MEMORY"
ENV_IGNORE = "DPBENCH_IGNORE_MEMORY_ESTIMATE"
ENV_MODE = "DPBENCH_MEMORY_ESTIMATE"
MODES = ("state", "peak")
_ESTIMATORS: dict[tuple[str, int, bool], Any] = {}
_CACHED = 16


class DoesNotFit(StrategyUnavailable):
    """The case's estimated memory exceeds what its devices have free (the message says by how much)."""


@dataclass(kw_only=True, frozen=True)
class Headroom:
    """What a CUDA device must hold beyond the estimate: memory torch's allocator never counts, or
    that no estimate made before the run can know."""

    context_bytes: int = 512 * 2**20
    """Each worker process's CUDA context on the device: the driver's state and the kernels it loads."""

    nccl_bytes: int = 2**30
    """NCCL's buffers on each GPU of a case whose ranks talk through NCCL. Sized for an NVSwitch
    node (a channel's buffers to each of 7 peers, and NVLink SHARP's), the most a node needs; a
    PCIe machine needs less."""

    fragmentation: float = 0.10
    """A fraction of the estimate on the device: the caching allocator's rounding and split blocks,
    and cuDNN's workspaces, allocated per convolution for an algorithm picked at run time."""

    def bytes(self, need: int, *, processes: int, nccl: bool) -> int:
        """The headroom of a device whose ``processes`` workers need ``need`` bytes together."""
        return processes * self.context_bytes + (self.nccl_bytes if nccl else 0) + int(self.fragmentation * need)

    def describe(self, *, processes: int, nccl: bool) -> str:
        """``CUDA context 0.5 GiB x 2 processes, NCCL buffers 1 GiB, fragmentation 10% of the estimate``."""
        parts = [f"CUDA context {_gib(self.context_bytes)} GiB x {processes} process{'es' if processes > 1 else ''}"]
        if nccl:
            parts.append(f"NCCL buffers {_gib(self.nccl_bytes)} GiB")
        parts.append(f"fragmentation {self.fragmentation:.0%} of the estimate")
        return ", ".join(parts)


CUDA_HEADROOM = Headroom()


def _estimator(workload: Any, activations: bool) -> Any:
    from dpbench.strategies.estimate import Estimator

    # One estimator per workload (its name and model factory: two workloads may share a name), so
    # the trials of a case build its meta and fake models once; the estimator keeps the workload
    # alive, so the factory's id is not reused while the entry lives. The oldest entries go first.
    key = (str(workload.params.get("spec", workload.name)), id(workload.model), activations)
    if key not in _ESTIMATORS:
        while len(_ESTIMATORS) >= _CACHED:
            _ESTIMATORS.pop(next(iter(_ESTIMATORS)))
        _ESTIMATORS[key] = Estimator(workload, activations=activations)
    return _ESTIMATORS[key]


def free_memory(
    device: str, devices: tuple[str, ...], environ: Mapping[str, str], *, nvml: Any = None
) -> dict[str, tuple[int, str]]:
    """``{device: (bytes, where)}`` for each distinct device; empty when it cannot be read.
    ``nvml``: the NVML module (None: ``pynvml``)."""
    from dpbench.strategies.memory import parse_bytes

    given = environ.get(ENV_DEVICE_MEMORY)
    if given:
        limit = parse_bytes(given, argument=ENV_DEVICE_MEMORY)
        return {d: (limit, f"{ENV_DEVICE_MEMORY}={given}") for d in dict.fromkeys(devices)}
    if device == "cpu":
        import psutil

        return {"cpu": (int(psutil.virtual_memory().available), "available RAM")}
    return _gpu_free(devices, environ, nvml)


def _gpu_handles(devices: tuple[str, ...], environ: Mapping[str, str], nvml: Any) -> dict[str, tuple[Any, Any]]:
    """``{device: (GpuInfo, handle)}`` for each distinct device (its GPU's handle for a MIG slice).
    The caller holds NVML initialised: ``probe_gpus`` pairs its own init with a shutdown."""
    from dpbench.sampler.gpus import probe_gpus

    visible = probe_gpus(nvml, environ)  # CUDA's order under CUDA_VISIBLE_DEVICES, read through NVML
    out = {}
    for d in dict.fromkeys(devices):
        info = visible[int(d.split(":")[1])]
        out[d] = (info, nvml.nvmlDeviceGetHandleByUUID(info.parent_uuid or info.uuid))
    return out


def _with_nvml(nvml: Any, read: Any) -> Any:
    """``read(nvml)`` between an init and a shutdown of NVML; None when NVML cannot say."""
    from dpbench.sampler.gpus import with_nvml

    return with_nvml(nvml, read)


def _gpu_free(devices: tuple[str, ...], environ: Mapping[str, str], nvml: Any) -> dict[str, tuple[int, str]]:
    def read(nvml: Any) -> dict[str, tuple[int, str]]:
        return {
            d: (int(nvml.nvmlDeviceGetMemoryInfo(handle).free), "free (NVML)")
            for d, (info, handle) in _gpu_handles(devices, environ, nvml).items()
            if info.parent_uuid is None  # a MIG instance: NVML reports the parent's memory, not the slice's
        }

    return _with_nvml(nvml, read) or {}


def gpu_capability(devices: tuple[str, ...], environ: Mapping[str, str], *, nvml: Any = None) -> tuple[int, int] | None:
    """The compute capability of ``devices`` whose workspaces are the largest, read through NVML
    (None when it cannot be read)."""
    from dpbench.strategies.workspaces import cuda_workspaces

    def read(nvml: Any) -> set[tuple[int, int]]:
        return {
            tuple(int(v) for v in nvml.nvmlDeviceGetCudaComputeCapability(handle))
            for _, handle in _gpu_handles(devices, environ, nvml).values()
        }

    found = _with_nvml(nvml, read)
    return max(sorted(found), key=lambda c: cuda_workspaces(c, environ).per_device()) if found else None


def check_fits(
    strategy_cls: Any,
    workload: Any,
    *,
    world_size: int,
    global_batch: int,
    device: str,
    devices: tuple[str, ...],
    processes: int,
    options: CommonOptions,
    backend: str | None = None,
    environ: Mapping[str, str] | None = None,
    nvml: Any = None,
    headroom: Headroom = CUDA_HEADROOM,
) -> dict[str, Any] | None:
    """Raise :class:`DoesNotFit` when the case's estimate (plus the ``headroom`` on a GPU) exceeds
    the free memory; return the estimate (``CaseEstimate.to_dict()``) otherwise, None when it was
    not made. ``backend``: the case's process group backend (``"nccl"`` adds NCCL's buffers to the
    headroom); ``nvml``: the NVML module (None: ``pynvml``)."""
    from dpbench.strategies.workspaces import cuda_workspaces

    environ = os.environ if environ is None else environ
    if environ.get(ENV_IGNORE, "").strip().lower() in ("1", "true", "yes", "on"):
        return None
    mode = environ.get(ENV_MODE, "state").strip() or "state"
    if mode not in MODES:
        raise ValueError(f"{ENV_MODE}: expected one of {', '.join(MODES)}, found {mode!r}")
    cuda = cuda_workspaces(gpu_capability(devices, environ, nvml=nvml), environ) if device == "cuda" else None
    case = None
    for activations in dict.fromkeys((mode == "peak", False)):
        try:
            case = _estimator(workload, activations).case(
                strategy_cls.name, world_size=world_size, global_batch=global_batch, options=options, cuda=cuda
            )
            break
        except Exception:  # noqa: BLE001 - an estimate that fails never blocks a run: the run says what is wrong
            continue
    if case is None:
        return None
    free = free_memory(device, devices, environ, nvml=nvml)
    ranks = case.ranks
    # Worker r runs on devices[r] (an in-process strategy: one worker, on its first device).
    placed = devices[: len(ranks)] if len(devices) >= len(ranks) else (devices[0],) * len(ranks)
    for target, (limit, where) in free.items():
        on_it = [r for r, d in zip(ranks, placed) if d == target]
        need = sum(r.need_bytes() for r in on_it)
        # A GPU also holds what no estimate counts: the workers' CUDA contexts, NCCL, fragmentation.
        gpu = {"processes": len(on_it), "nccl": backend == "nccl"}
        room = headroom.bytes(need, **gpu) if device == "cuda" else 0
        if on_it and need + room > limit:
            why = headroom.describe(**gpu) if device == "cuda" else None
            raise DoesNotFit(_reason(case, on_it, need, limit, where, target, room, why))
    return case.to_dict()


def _gib(n: int) -> str:
    return f"{n / 2**30:.3g}"


def _reason(
    case: Any, ranks: list[Any], need: int, limit: int, where: str, target: str, room: int, why: str | None
) -> str:
    worst = max(ranks, key=lambda r: r.need_bytes())
    parts = [
        f"params {_gib(worst.params_bytes)}",
        f"grads {_gib(worst.grads_bytes)}",
        f"{case.optimizer} {_gib(worst.optimizer_state_bytes)}",
    ]
    if worst.comm_buffer_bytes:
        parts.append(f"buffers {_gib(worst.comm_buffer_bytes)}")
    if worst.workspace_bytes:
        parts.append(f"CUDA workspaces {_gib(worst.workspace_bytes)}")
    if worst.activation_bytes is not None:
        parts.append(f"beyond grads {_gib(worst.activation_bytes)}")  # a step's peak beyond them
    sharing = f" × {len(ranks)} workers sharing {target}" if len(ranks) > 1 else ""
    total = f"~{_gib(need)} GiB" + (f" + headroom ~{_gib(room)} GiB ({why})" if why else "")
    return (
        f"{case.strategy} w{case.world_size} needs ~{_gib(worst.need_bytes())} GiB per rank ({', '.join(parts)} GiB)"
        f"{sharing}: {total}, the device has {_gib(limit)} GiB ({where}); "
        f"set {ENV_IGNORE}=1 (--dpbench-ignore-memory-estimate) to run it anyway"
    )
