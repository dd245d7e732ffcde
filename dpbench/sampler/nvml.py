"""NVML backend: GPU utilization, memory, power, energy, temperature and clocks.

Device mapping. The benchmark names GPUs by CUDA index (``cuda:0`` …) as its processes see
them; NVML ignores ``CUDA_VISIBLE_DEVICES`` and its index order need not match CUDA's. We
therefore rebuild CUDA's view from NVML alone — never by creating a CUDA context here:

1. List the physical GPUs through NVML with their UUID and PCI bus id, and order them as
   CUDA does before masking. With ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` that is PCI bus order.
   CUDA's default, ``FASTEST_FIRST``, only promises that the fastest GPU is device 0 and
   leaves the rest unspecified; for identical GPUs it is PCI bus order in practice, so we
   use PCI bus order and warn (``SamplerWarning``) when the GPUs are not all the same
   model — set ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (or UUIDs in ``CUDA_VISIBLE_DEVICES``) there.
2. Apply ``CUDA_VISIBLE_DEVICES`` like CUDA: entries are indices into that order, ``GPU-``
   UUIDs or ``MIG-`` UUIDs (any unique prefix); the first invalid, ambiguous or repeated
   entry hides itself and everything after it; an empty value hides every GPU.
3. ``cuda:i`` is the i-th remaining GPU. From then on handles are looked up by UUID.

A metric that NVML reports as NotSupported / FunctionNotFound (MIG, some boards) is left
empty and not asked again; any other failure is recorded in the error log and sampling
goes on.
"""
from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

from .cpu import CpuBackend
from .errors import NvmlUnavailable, SamplerWarning
from .timeline import METRIC_INDEX, cuda_label, new_values

__all__ = ["UTILIZATION_CAVEAT", "GpuInfo", "NvmlBackend", "probe_gpus", "resolve_devices"]

UTILIZATION_CAVEAT = (
    "NVML utilization (gpu_util_pct) is the percent of time, over a sample period of 1/6 s "
    "to 1 s depending on the product, during which one or more kernels was executing on "
    "the GPU. It is not SM occupancy or achieved FLOP/s: one small kernel running all the "
    "time reads 100 %. mem_util_pct is likewise the percent of time device memory was "
    "being read or written."
)

_UUID_TOKEN = re.compile(r"^(GPU|MIG)-")


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as the benchmark sees it. ``parent_uuid`` is set for a MIG instance."""

    uuid: str
    name: str
    pci_bus_id: str
    parent_uuid: str | None = None
    label: str = ""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _code(nvml, exc: BaseException) -> int | None:
    return getattr(exc, "value", None) if isinstance(exc, nvml.NVMLError) else None


def _pci_key(bus_id: str):
    # "00000000:1A:00.0" → (0, 0x1a, 0, 0); anything unparsable sorts after, by text.
    try:
        return (0, tuple(int(part, 16) for part in re.split(r"[:.]", bus_id)), bus_id)
    except ValueError:
        return (1, (), bus_id)


def load_nvml(module=None):
    if module is not None:
        return module
    try:
        import pynvml
    except ImportError as exc:  # the package is a dependency, but keep the CPU path alive
        raise NvmlUnavailable(f"pynvml is not importable ({exc})") from exc
    return pynvml


def _mig_instances(nvml, parent: dict) -> list[GpuInfo]:
    """The MIG instances of a physical GPU (empty when MIG is off or unsupported)."""
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(parent["handle"])
        if current != getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1):
            return []
        count = nvml.nvmlDeviceGetMaxMigDeviceCount(parent["handle"])
    except (nvml.NVMLError, AttributeError):
        return []
    out = []
    for i in range(count):
        try:
            handle = nvml.nvmlDeviceGetMigDeviceHandleByIndex(parent["handle"], i)
            uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        except nvml.NVMLError:
            continue  # an empty MIG slot
        out.append(GpuInfo(uuid, f"{parent['name']} MIG", parent["pci"], parent["uuid"]))
    return out


def _match(token: str, ordered: list[dict], nvml, mig_cache: list) -> GpuInfo | None:
    if token.isdigit():  # CUDA accepts plain non-negative indices only ("-1" is invalid)
        index = int(token)
        if index < len(ordered):
            p = ordered[index]
            return GpuInfo(p["uuid"], p["name"], p["pci"])
        return None
    if not _UUID_TOKEN.match(token):
        return None
    if token.startswith("GPU-"):
        found = [GpuInfo(p["uuid"], p["name"], p["pci"]) for p in ordered if p["uuid"].startswith(token)]
    else:
        if not mig_cache:
            mig_cache.append([m for p in ordered for m in _mig_instances(nvml, p)])
        found = [m for m in mig_cache[0] if m.uuid.startswith(token)]
    return found[0] if len(found) == 1 else None


def probe_gpus(nvml, environ: Mapping[str, str]) -> list[GpuInfo]:
    """The GPUs visible to CUDA under ``environ``, in CUDA order, read through NVML.

    Raises NvmlUnavailable (with the reason) when NVML cannot start or no GPU is visible.
    """
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise NvmlUnavailable(f"nvmlInit failed: {exc}") from exc
    try:
        physical = []
        for i in range(nvml.nvmlDeviceGetCount()):
            # Index order is only used to enumerate; everything after goes by UUID.
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            physical.append(
                {
                    "handle": handle,
                    "uuid": _text(nvml.nvmlDeviceGetUUID(handle)),
                    "name": _text(nvml.nvmlDeviceGetName(handle)),
                    "pci": _text(nvml.nvmlDeviceGetPciInfo(handle).busId),
                }
            )
        if not physical:
            raise NvmlUnavailable("NVML found no GPUs")
        ordered = sorted(physical, key=lambda p: _pci_key(p["pci"]))
        order = environ.get("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
        if order != "PCI_BUS_ID" and len({p["name"] for p in ordered}) > 1:
            warnings.warn(
                SamplerWarning(
                    f"CUDA_DEVICE_ORDER={order}: with different GPU models CUDA's index order "
                    "is unspecified; the sampler assumes PCI bus order. Set "
                    "CUDA_DEVICE_ORDER=PCI_BUS_ID (or UUIDs in CUDA_VISIBLE_DEVICES) so "
                    "cuda:N names the same GPU here and in the benchmark."
                ),
                stacklevel=3,
            )
        mask = environ.get("CUDA_VISIBLE_DEVICES")
        if mask is None:
            return [GpuInfo(p["uuid"], p["name"], p["pci"]) for p in ordered]
        visible: list[GpuInfo] = []
        mig_cache: list = []
        for token in mask.split(","):
            gpu = _match(token.strip(), ordered, nvml, mig_cache)
            if gpu is None or any(v.uuid == gpu.uuid for v in visible):
                break  # CUDA: an invalid entry hides itself and every entry after it
            visible.append(gpu)
        if not visible:
            raise NvmlUnavailable(f"no GPU visible with CUDA_VISIBLE_DEVICES={mask!r}")
        return visible
    finally:
        nvml.nvmlShutdown()


def resolve_devices(devices, visible: Sequence[GpuInfo]) -> list[GpuInfo]:
    """``devices`` (None = all visible; CUDA indices, ``"cuda:N"`` or ``torch.device("cuda", N)``)
    → labelled GpuInfos, in the order given."""
    available = ", ".join(f"cuda:{i} ({g.name}, {g.uuid})" for i, g in enumerate(visible)) or "none"
    if devices is None:
        return [replace(g, label=cuda_label(i)) for i, g in enumerate(visible)]
    if isinstance(devices, (int, str)):
        devices = [devices]
    out: list[GpuInfo] = []
    for entry in devices:
        index = None
        if isinstance(entry, int) and not isinstance(entry, bool):
            index = entry
        elif isinstance(entry, str) and re.fullmatch(r"cuda:\d+", entry.strip()):
            index = int(entry.strip()[5:])
        elif getattr(entry, "type", None) == "cuda" and isinstance(getattr(entry, "index", None), int):
            index = entry.index  # a torch.device, recognised without importing torch
        if index is None:
            raise ValueError(
                f"devices: expected CUDA indices (0, 1, …) or 'cuda:N' strings, found {entry!r}"
            )
        if not 0 <= index < len(visible):
            raise ValueError(f"devices: unknown device {entry!r}; available: {available}")
        gpu = replace(visible[index], label=cuda_label(index))
        if gpu in out:
            raise ValueError(f"devices: {entry!r} is listed twice")
        out.append(gpu)
    return out


@dataclass
class _Gpu:
    info: GpuInfo
    handle: Any = None
    unsupported: set = field(default_factory=set)
    memory_v2: bool = True
    temperature_v: bool = True
    energy_base: float | None = None


class NvmlBackend:
    """Samples one ``cuda:<i>`` row per watched GPU, plus the CPU backend's rows with
    per-process GPU memory added to the ``pid:`` rows."""

    name = "nvml"

    def __init__(self, nvml, gpus: Sequence[GpuInfo], cpu: CpuBackend, report_error: Callable[[str], None]):
        self._nvml = nvml
        self._cpu = cpu
        self._report_error = report_error
        self._gpus = [_Gpu(g) for g in gpus]
        self._watch_pids = bool(cpu.pids)
        self._open = False
        missing = {getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", 3), getattr(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", 13)}
        self._unsupported_codes = missing
        self._fallback_codes = missing | {getattr(nvml, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", 25)}

    # -- lifecycle -------------------------------------------------------------------
    def open(self) -> None:
        nvml = self._nvml
        nvml.nvmlInit()  # reference-counted by NVML: several samplers can be open at once
        self._open = True
        try:
            for gpu in self._gpus:
                gpu.handle = self._handle(gpu.info)
                gpu.unsupported = set()
                gpu.memory_v2 = hasattr(nvml, "nvmlMemory_v2")
                gpu.temperature_v = hasattr(nvml, "nvmlDeviceGetTemperatureV")
                gpu.energy_base = None
                base = self._read(gpu, "energy", lambda h: nvml.nvmlDeviceGetTotalEnergyConsumption(h))
                gpu.energy_base = None if base is None else float(base)
            self._cpu.open()
        except BaseException:
            self.close()
            raise

    def _handle(self, info: GpuInfo):
        nvml = self._nvml
        if info.parent_uuid is None:
            return nvml.nvmlDeviceGetHandleByUUID(info.uuid)
        parent = nvml.nvmlDeviceGetHandleByUUID(info.parent_uuid)
        for i in range(nvml.nvmlDeviceGetMaxMigDeviceCount(parent)):
            try:
                handle = nvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, i)
            except nvml.NVMLError:
                continue
            if _text(nvml.nvmlDeviceGetUUID(handle)) == info.uuid:
                return handle
        raise RuntimeError(f"{info.label}: MIG instance {info.uuid} is gone")

    def close(self) -> None:
        self._cpu.close()
        if self._open:
            self._open = False
            self._nvml.nvmlShutdown()

    def describe(self) -> dict[str, dict]:
        info = self._cpu.describe()
        for gpu in self._gpus:
            info[gpu.info.label] = {
                "uuid": gpu.info.uuid,
                "name": gpu.info.name,
                "pci_bus_id": gpu.info.pci_bus_id,
                "unsupported": sorted(gpu.unsupported),
                "memory_api": "v2" if gpu.memory_v2 else "v1 (used includes reserved)",
            }
        return info

    # -- sampling (runs on the sampler thread) ---------------------------------------
    def _read(self, gpu: _Gpu, metric: str, call: Callable[[Any], Any]):
        """call(handle), or None when unsupported (remembered) or failed (logged)."""
        if metric in gpu.unsupported:
            return None
        try:
            return call(gpu.handle)
        except Exception as exc:
            if _code(self._nvml, exc) in self._unsupported_codes:
                gpu.unsupported.add(metric)
            else:
                self._report_error(f"{gpu.info.label} {metric}: {type(exc).__name__}: {exc}")
            return None

    def _memory(self, handle, gpu: _Gpu):
        nvml = self._nvml
        if gpu.memory_v2:
            try:
                m = nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
                return m.used, m.reserved, m.total
            except Exception as exc:
                if not isinstance(exc, TypeError) and _code(nvml, exc) not in self._fallback_codes:
                    raise
                gpu.memory_v2 = False  # old driver: v1 only, whose `used` includes reserved
        m = nvml.nvmlDeviceGetMemoryInfo(handle)
        return m.used, math.nan, m.total

    def _temperature(self, handle, gpu: _Gpu):
        nvml = self._nvml
        if gpu.temperature_v:
            try:
                return nvml.nvmlDeviceGetTemperatureV(handle, nvml.NVML_TEMPERATURE_GPU)
            except Exception as exc:
                if _code(nvml, exc) not in self._fallback_codes:
                    raise
                gpu.temperature_v = False  # driver without the versioned call
        return nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)

    def _sample_gpu(self, gpu: _Gpu) -> list[float]:
        nvml, v, ix = self._nvml, new_values(), METRIC_INDEX
        util = self._read(gpu, "utilization", nvml.nvmlDeviceGetUtilizationRates)
        if util is not None:
            v[ix["gpu_util_pct"]], v[ix["mem_util_pct"]] = float(util.gpu), float(util.memory)
        mem = self._read(gpu, "memory", lambda h: self._memory(h, gpu))
        if mem is not None:
            v[ix["mem_used_bytes"]], v[ix["mem_reserved_bytes"]], v[ix["mem_total_bytes"]] = map(float, mem)
        power = self._read(gpu, "power", nvml.nvmlDeviceGetPowerUsage)
        if power is not None:
            v[ix["power_w"]] = power / 1000.0  # NVML reports milliwatts
        energy = self._read(gpu, "energy", nvml.nvmlDeviceGetTotalEnergyConsumption)
        if energy is not None:
            if gpu.energy_base is None:
                gpu.energy_base = float(energy)
            v[ix["energy_j"]] = (energy - gpu.energy_base) / 1000.0  # counter is in mJ
        temp = self._read(gpu, "temperature", lambda h: self._temperature(h, gpu))
        if temp is not None:
            v[ix["temperature_c"]] = float(temp)
        for metric, clock in (("sm_clock_mhz", nvml.NVML_CLOCK_SM), ("mem_clock_mhz", nvml.NVML_CLOCK_MEM)):
            value = self._read(gpu, metric, lambda h: nvml.nvmlDeviceGetClockInfo(h, clock))
            if value is not None:
                v[ix[metric]] = float(value)
        return v

    def _process_memory(self, groups: Mapping[int, tuple[int, ...]]) -> dict[int, float]:
        """Watched pid → GPU memory of it and its children, summed over the watched GPUs."""
        owner = {p: watched for watched, members in groups.items() for p in members}
        total = {watched: 0.0 for watched in groups}
        for gpu in self._gpus:
            procs = self._read(gpu, "processes", self._nvml.nvmlDeviceGetComputeRunningProcesses)
            if procs is None:
                return {watched: math.nan for watched in groups}
            for proc in procs:
                watched = owner.get(proc.pid)
                if watched is not None:
                    used = proc.usedGpuMemory  # None where the driver cannot tell (WDDM)
                    total[watched] += math.nan if used is None else float(used)
        return total

    def sample(self, now: float, rows: list) -> None:
        gpu_rows = [(now, gpu.info.label, self._sample_gpu(gpu)) for gpu in self._gpus]
        proc_mem = None
        if self._watch_pids and self._gpus:
            proc_mem = self._process_memory(self._cpu.pid_groups(now))
        self._cpu.sample(now, rows, proc_mem)
        rows.extend(gpu_rows)
