"""A fake ``pynvml`` module: the calls the sampler uses, over scripted GPUs.

Passed to ``ResourceSampler(nvml=FakeNvml(...))``. It checks init/shutdown pairing (calls
while uninitialised raise, like NVML), counts calls per function and GPU, records every
energy-counter reading, and can make a call unsupported, fail, return garbage or block.
SM clocks, clock-event reasons and the energy counter can be scripted per read
(``sm_clock_seq``, ``reasons_seq``, ``energy_seq``); ``event_reasons=False`` plays a driver
without the ClocksEvent call, and ``hide`` a pynvml without some functions at all. MIG: a
GPU's ``mig`` lists its instances (each a FakeGpu with its own UUID, name and readings);
``mig_enabled`` turns MIG mode on with no instance created.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from types import SimpleNamespace

NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
_NAMES = {
    1: "Uninitialized",
    3: "Not Supported",
    6: "Not Found",
    9: "Driver Not Loaded",
    12: "NVML Shared Library Not Found",
    13: "Function Not Found",
    15: "GPU is lost",
}


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _NAMES.get(self.value, f"NVML error {self.value}")


@dataclass
class FakeGpu:
    uuid: str
    pci: str
    name: str = "Fake GPU 80GB"
    util: tuple[int, int] = (10, 5)  # (gpu %, memory %)
    used: int = 1 << 30
    reserved: int = 300 << 20
    total: int = 80 << 30
    power_mw: int = 250_000
    energy_mj: int = 1_000_000  # counter start; grows by energy_step_mj per read
    energy_step_mj: int = 500
    energy_seq: list = field(default_factory=list)  # the n-th counter read → seq[min(n, len-1)] (mJ), when set
    temperature: int = 40
    sm_clock: int = 1400
    mem_clock: int = 2600
    sm_clock_seq: list = field(default_factory=list)  # the n-th SM clock read → seq[min(n, len-1)]
    reasons: int = 0  # clock-event reasons bitmask
    reasons_seq: list = field(default_factory=list)  # like sm_clock_seq, for the reasons
    app_clock_target: int = 1980
    app_clock_default: int = 1980
    max_clock: int = 1980
    processes: list = field(default_factory=list)  # [(pid, used bytes or None)]
    unsupported: set = field(default_factory=set)  # function names raising NotSupported
    faults: dict = field(default_factory=dict)  # function name → exception or callable
    mig: list = field(default_factory=list)  # MIG instances (FakeGpu) when MIG is on
    mig_enabled: bool = False  # MIG mode on even without instances (mig=[]): no CUDA device then
    parent: FakeGpu | None = None


class FakeNvml:
    NVMLError = NVMLError
    NVML_ERROR_UNINITIALIZED = NVML_ERROR_UNINITIALIZED
    NVML_ERROR_NOT_SUPPORTED = NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_NOT_FOUND = NVML_ERROR_NOT_FOUND
    NVML_ERROR_FUNCTION_NOT_FOUND = NVML_ERROR_FUNCTION_NOT_FOUND
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_CLOCK_ID_CURRENT = 0
    NVML_CLOCK_ID_APP_CLOCK_TARGET = 1
    NVML_CLOCK_ID_APP_CLOCK_DEFAULT = 2
    NVML_DEVICE_MIG_ENABLE = 1
    nvmlMemory_v2 = 0x02000028

    def __init__(self, gpus, *, v1_only=False, temperature_v=True, init_error=None, event_reasons=True, hide=()):
        self.hide = frozenset(hide)  # set first: __getattribute__ reads it
        self.event_reasons = event_reasons
        self.reads: dict[tuple[str, str], int] = {}
        self.gpus = list(gpus)
        self.v1_only = v1_only
        self.temperature_v = temperature_v
        self.init_error = init_error
        self.refs = 0
        self.init_calls = 0
        self.calls: dict[tuple[str, str], int] = {}
        self.energy_readings: dict[str, list[int]] = {g.uuid: [] for g in self.gpus}
        self._lock = threading.Lock()

    def __getattribute__(self, name):
        # An old pynvml simply lacks newer functions: hasattr/getattr must see them missing.
        if not name.startswith("_") and name != "hide" and name in object.__getattribute__(self, "hide"):
            raise AttributeError(name)
        return object.__getattribute__(self, name)

    def _scripted(self, name: str, gpu: FakeGpu, seq: list, default):
        with self._lock:
            n = self.reads.get((name, gpu.uuid), 0)
            self.reads[(name, gpu.uuid)] = n + 1
        return seq[min(n, len(seq) - 1)] if seq else default

    # -- library -------------------------------------------------------------------------
    def nvmlInit(self):
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        with self._lock:
            self.refs += 1
            self.init_calls += 1

    def nvmlShutdown(self):
        with self._lock:
            if self.refs == 0:
                raise NVMLError(NVML_ERROR_UNINITIALIZED)
            self.refs -= 1

    def _enter(self, name: str, gpu: FakeGpu | None = None):
        if self.refs == 0:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        if gpu is None:
            return
        with self._lock:
            key = (name, gpu.uuid)
            self.calls[key] = self.calls.get(key, 0) + 1
        if name in gpu.unsupported:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        fault = gpu.faults.get(name)
        if isinstance(fault, BaseException):
            raise fault
        if callable(fault):
            return fault()
        return None

    def count(self, name: str, gpu: FakeGpu) -> int:
        return self.calls.get((name, gpu.uuid), 0)

    # -- enumeration ---------------------------------------------------------------------
    def nvmlDeviceGetCount(self):
        self._enter("count")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        self._enter("by_index")
        return self.gpus[index]

    def nvmlDeviceGetHandleByUUID(self, uuid):
        self._enter("by_uuid")
        for gpu in self.gpus:
            if gpu.uuid == uuid:
                return gpu
        raise NVMLError(NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetUUID(self, gpu):
        self._enter("uuid")
        return gpu.uuid

    def nvmlDeviceGetName(self, gpu):
        self._enter("name")
        return gpu.name.encode()  # old pynvml returned bytes; the sampler must cope

    def nvmlDeviceGetPciInfo(self, gpu):
        self._enter("pci")
        return SimpleNamespace(busId=gpu.pci.encode())

    def nvmlDeviceGetMigMode(self, gpu):
        self._enter("mig_mode")
        return (1, 1) if gpu.mig or gpu.mig_enabled else (0, 0)

    def nvmlDeviceGetMaxMigDeviceCount(self, gpu):
        self._enter("mig_count")
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, gpu, index):
        self._enter("mig_handle")
        if index >= len(gpu.mig):
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        gpu.mig[index].parent = gpu
        return gpu.mig[index]

    # -- metrics -------------------------------------------------------------------------
    def nvmlDeviceGetUtilizationRates(self, gpu):
        out = self._enter("nvmlDeviceGetUtilizationRates", gpu)
        return out if out is not None else SimpleNamespace(gpu=gpu.util[0], memory=gpu.util[1])

    def nvmlDeviceGetMemoryInfo(self, gpu, version=None):
        self._enter("nvmlDeviceGetMemoryInfo", gpu)
        if version is not None:
            if self.v1_only:  # old driver: pynvml cannot find nvmlDeviceGetMemoryInfo_v2
                raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
            free = gpu.total - gpu.used - gpu.reserved
            return SimpleNamespace(used=gpu.used, reserved=gpu.reserved, total=gpu.total, free=free)
        # v1: `used` includes the driver-reserved memory
        return SimpleNamespace(used=gpu.used + gpu.reserved, total=gpu.total, free=gpu.total - gpu.used - gpu.reserved)

    def nvmlDeviceGetPowerUsage(self, gpu):
        self._enter("nvmlDeviceGetPowerUsage", gpu)
        return gpu.power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, gpu):
        self._enter("nvmlDeviceGetTotalEnergyConsumption", gpu)
        scripted = self._scripted("energy", gpu, gpu.energy_seq, None) if gpu.energy_seq else None
        with self._lock:
            gpu.energy_mj = scripted if scripted is not None else gpu.energy_mj + gpu.energy_step_mj
            self.energy_readings.setdefault(gpu.uuid, []).append(gpu.energy_mj)
            return gpu.energy_mj

    def nvmlDeviceGetTemperatureV(self, gpu, sensor):
        self._enter("nvmlDeviceGetTemperatureV", gpu)
        if not self.temperature_v:
            raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
        return gpu.temperature

    def nvmlDeviceGetTemperature(self, gpu, sensor):
        self._enter("nvmlDeviceGetTemperature", gpu)
        return gpu.temperature

    def nvmlDeviceGetClockInfo(self, gpu, clock):
        self._enter(f"nvmlDeviceGetClockInfo:{clock}", gpu)
        if clock == self.NVML_CLOCK_SM:
            return self._scripted("sm_clock", gpu, gpu.sm_clock_seq, gpu.sm_clock)
        return gpu.mem_clock

    def nvmlDeviceGetClock(self, gpu, clock, clock_id):
        self._enter("nvmlDeviceGetClock", gpu)
        if clock_id == self.NVML_CLOCK_ID_APP_CLOCK_TARGET:
            return gpu.app_clock_target
        return gpu.app_clock_default

    def nvmlDeviceGetMaxClockInfo(self, gpu, clock):
        self._enter("nvmlDeviceGetMaxClockInfo", gpu)
        return gpu.max_clock

    def nvmlDeviceGetCurrentClocksEventReasons(self, gpu):
        self._enter("nvmlDeviceGetCurrentClocksEventReasons", gpu)
        if not self.event_reasons:  # driver older than the ClocksEvent name
            raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
        return self._scripted("reasons", gpu, gpu.reasons_seq, gpu.reasons)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, gpu):
        self._enter("nvmlDeviceGetCurrentClocksThrottleReasons", gpu)
        return self._scripted("reasons", gpu, gpu.reasons_seq, gpu.reasons)

    def nvmlDeviceGetComputeRunningProcesses(self, gpu):
        self._enter("nvmlDeviceGetComputeRunningProcesses", gpu)
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in gpu.processes]


def three_gpus() -> list[FakeGpu]:
    """Three GPUs whose NVML index order (bb, cc, aa), UUID order (aa, bb, cc) and PCI bus
    order (cc, aa, bb) all differ, each with distinct metric values to tell them apart."""
    return [
        FakeGpu("GPU-bb22-0000", "00000000:81:00.0", util=(30, 3), temperature=63, power_mw=300_000),
        FakeGpu("GPU-cc33-0000", "00000000:1A:00.0", util=(10, 1), temperature=61, power_mw=100_000),
        FakeGpu("GPU-aa11-0000", "00000000:3B:00.0", util=(20, 2), temperature=62, power_mw=200_000),
    ]


# CUDA order (PCI bus order) of three_gpus(): cuda:0 = cc, cuda:1 = aa, cuda:2 = bb.
CUDA_ORDER = ["GPU-cc33-0000", "GPU-aa11-0000", "GPU-bb22-0000"]
