"""NVML backend: GPU utilization, memory, power, energy, temperature, clocks and clock-event
(throttle) reasons, per watched GPU. Which GPUs those are, and how ``cuda:N`` maps to an
NVML device, is ``gpus.py``; what the clock readings mean over a recording, ``clocks.py``.

A metric that NVML reports as NotSupported / FunctionNotFound (MIG, some boards) is left
empty and not asked again; any other failure is recorded in the error log and sampling
goes on.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .cpu import CpuBackend
from .energy import UTILIZATION_PERIOD_MAX_S, EnergyCounter
from .gpus import GpuInfo, _text, load_nvml, probe_gpus, resolve_devices
from .timeline import METRIC_INDEX, new_values

__all__ = ["UTILIZATION_CAVEAT", "GpuInfo", "NvmlBackend", "load_nvml", "probe_gpus", "resolve_devices"]

UTILIZATION_CAVEAT = (
    "NVML utilization (gpu_util_pct) is the percent of time, over a sample period of 1/6 s "
    f"to {UTILIZATION_PERIOD_MAX_S:g} s depending on the product, during which one or more kernels was executing on "
    "the GPU. It is not SM occupancy or achieved FLOP/s: one small kernel running all the "
    "time reads 100 %. mem_util_pct is likewise the percent of time device memory was "
    "being read or written."
)


def _code(nvml, exc: BaseException) -> int | None:
    return getattr(exc, "value", None) if isinstance(exc, nvml.NVMLError) else None


@dataclass
class _Gpu:
    info: GpuInfo
    handle: Any = None
    unsupported: set = field(default_factory=set)
    memory_v2: bool = True
    temperature_v: bool = True
    reasons_event: bool = True  # nvmlDeviceGetCurrentClocksEventReasons (else the older Throttle name)
    energy: EnergyCounter = field(default_factory=EnergyCounter)  # the counter since open(), wraps undone
    clock_targets: dict = field(default_factory=dict)  # read once at open(); see _clock_targets


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
                gpu.reasons_event = True
                gpu.energy = EnergyCounter()
                gpu.clock_targets = self._clock_targets(gpu)
                base = self._read(gpu, "energy", lambda h: nvml.nvmlDeviceGetTotalEnergyConsumption(h))
                if base is not None:
                    gpu.energy.read(base, 0.0)  # the base the timeline's energy_j counts from
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
                "energy_reset": gpu.energy.reset,  # None, or where the counter went back (not a wrap)
                **gpu.clock_targets,
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

    def _clock_targets(self, gpu: _Gpu) -> dict[str, float | None]:
        """The SM clocks the GPU is configured for (None where NVML does not say): the
        application-clock target and default, and the maximum. A target below the default
        means application clocks were set; see clocks.py for what "locked" can mean."""
        nvml = self._nvml
        sm = nvml.NVML_CLOCK_SM
        out: dict[str, float | None] = {}
        for key, clock_id in (
            ("sm_app_clock_target_mhz", "NVML_CLOCK_ID_APP_CLOCK_TARGET"),
            ("sm_app_clock_default_mhz", "NVML_CLOCK_ID_APP_CLOCK_DEFAULT"),
        ):
            ident = getattr(nvml, clock_id, None)
            value = None
            if ident is not None and hasattr(nvml, "nvmlDeviceGetClock"):
                value = self._read(gpu, key, lambda h, ident=ident: nvml.nvmlDeviceGetClock(h, sm, ident))
            out[key] = None if value is None else float(value)
        value = None
        if hasattr(nvml, "nvmlDeviceGetMaxClockInfo"):
            value = self._read(gpu, "sm_max_clock_mhz", lambda h: nvml.nvmlDeviceGetMaxClockInfo(h, sm))
        out["sm_max_clock_mhz"] = None if value is None else float(value)
        return out

    def _reasons(self, handle, gpu: _Gpu):
        """Clock-event reasons bitmask: the current NVML name, else the pre-12.x "Throttle" one."""
        nvml = self._nvml
        if gpu.reasons_event:
            call = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
            if call is not None:
                try:
                    return call(handle)
                except Exception as exc:
                    if _code(nvml, exc) not in self._fallback_codes:
                        raise
            gpu.reasons_event = False  # older driver or pynvml: use the deprecated name
        call = getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        if call is None:
            raise nvml.NVMLError(getattr(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", 13))
        return call(handle)

    def _sample_gpu(self, gpu: _Gpu, now: float) -> list[float]:
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
        joules = None if energy is None else gpu.energy.read(energy, now)  # counter is in mJ
        if joules is not None:
            v[ix["energy_j"]] = joules
        temp = self._read(gpu, "temperature", lambda h: self._temperature(h, gpu))
        if temp is not None:
            v[ix["temperature_c"]] = float(temp)
        for metric, clock in (("sm_clock_mhz", nvml.NVML_CLOCK_SM), ("mem_clock_mhz", nvml.NVML_CLOCK_MEM)):
            value = self._read(gpu, metric, lambda h, clock=clock: nvml.nvmlDeviceGetClockInfo(h, clock))
            if value is not None:
                v[ix[metric]] = float(value)
        reasons = self._read(gpu, "throttle_reasons", lambda h: self._reasons(h, gpu))
        if reasons is not None:
            v[ix["throttle_reasons"]] = float(reasons)
        return v

    def _process_memory(self, groups: Mapping[int, tuple[int, ...]]) -> dict[int, float]:
        """Watched pid → GPU memory of it and its children, summed over the watched GPUs.

        NaN (unknown), never 0, when none of a watched group's pids appears in NVML's process
        lists: inside a container with its own PID namespace NVML reports host pids, which
        match none of ours, and "0 bytes" would then be a wrong reading, not a measurement.
        """
        owner = {p: watched for watched, members in groups.items() for p in members}
        total = {watched: 0.0 for watched in groups}
        matched: set[int] = set()
        for gpu in self._gpus:
            procs = self._read(gpu, "processes", self._nvml.nvmlDeviceGetComputeRunningProcesses)
            if procs is None:
                return {watched: math.nan for watched in groups}
            for proc in procs:
                watched = owner.get(proc.pid)
                if watched is not None:
                    matched.add(watched)
                    used = proc.usedGpuMemory  # None where the driver cannot tell (WDDM)
                    total[watched] += math.nan if used is None else float(used)
        return {watched: value if watched in matched else math.nan for watched, value in total.items()}

    def sample(self, now: float, rows: list) -> None:
        gpu_rows = [(now, gpu.info.label, self._sample_gpu(gpu, now)) for gpu in self._gpus]
        proc_mem = None
        if self._watch_pids and self._gpus:
            proc_mem = self._process_memory(self._cpu.pid_groups(now))
        self._cpu.sample(now, rows, proc_mem)
        rows.extend(gpu_rows)
