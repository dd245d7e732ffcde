"""Which GPUs the benchmark sees, named as CUDA names them, found through NVML alone.

The benchmark names GPUs by CUDA index (``cuda:0`` …) as its processes see them; NVML
ignores ``CUDA_VISIBLE_DEVICES`` and its index order need not match CUDA's. We therefore
rebuild CUDA's view from NVML alone — never by creating a CUDA context here:

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

MIG: a GPU in MIG mode is not a CUDA device; its MIG instances are. Without
``CUDA_VISIBLE_DEVICES`` CUDA enumerates, GPU by GPU in the order above, the GPU itself when
MIG is off and its MIG instances (NVML's MIG index order) when MIG is on, so ``cuda:i`` maps
to that expanded list (plain indices in ``CUDA_VISIBLE_DEVICES`` index into it too). Older
CUDA releases (the MIG user guide: CUDA 11 / R450 and CUDA 12 / R525) let one process
enumerate a single MIG device only; ``cuda:0`` is still the first entry of the list, so the
map stays right for every device the process can use.

Several ranks or replicas may share one GPU (two ranks on ``cuda:0``): the sampler watches
each physical device once; :func:`unique_devices` turns a per-rank device list into that
set and :func:`rank_devices` keeps which ranks used each device.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .errors import NvmlUnavailable, SamplerWarning
from .timeline import cuda_label

__all__ = ["GpuInfo", "load_nvml", "probe_gpus", "resolve_devices", "unique_devices", "rank_devices", "with_nvml"]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


_UUID_TOKEN = re.compile(r"^(GPU|MIG)-")


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as the benchmark sees it. ``parent_uuid`` is set for a MIG instance."""

    uuid: str
    name: str
    pci_bus_id: str
    parent_uuid: str | None = None
    label: str = ""


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


def with_nvml(nvml: Any, read: Any) -> Any:
    """``read(nvml)`` between an init and a shutdown of NVML (``nvml``: the module, None for
    ``pynvml``); None when NVML cannot say (no library, no driver, no GPU, a device it cannot read)."""
    try:
        nvml = load_nvml(nvml)
        nvml.nvmlInit()
    except Exception:  # no NVML, no driver: nothing to read
        return None
    try:
        return read(nvml)
    except Exception:  # no GPU, an index or a device NVML cannot read
        return None
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def _mig_instances(nvml, parent: dict) -> list[GpuInfo] | None:
    """The MIG instances of a physical GPU; None when MIG is off or unsupported (a GPU in
    MIG mode without instances gives [] : CUDA cannot use it)."""
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(parent["handle"])
        if current != getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1):
            return None
        count = nvml.nvmlDeviceGetMaxMigDeviceCount(parent["handle"])
    except (nvml.NVMLError, AttributeError):
        return None
    out = []
    for i in range(count):
        try:
            handle = nvml.nvmlDeviceGetMigDeviceHandleByIndex(parent["handle"], i)
            uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        except nvml.NVMLError:
            continue  # an empty MIG slot
        try:  # "NVIDIA A100-SXM4-40GB MIG 1g.5gb": the profile says how big a slice it is
            name = _text(nvml.nvmlDeviceGetName(handle))
        except nvml.NVMLError:
            name = f"{parent['name']} MIG"
        out.append(GpuInfo(uuid, name, parent["pci"], parent["uuid"]))
    return out


def _cuda_devices(nvml, ordered: list[dict]) -> list[GpuInfo]:
    """What CUDA enumerates without a mask: each GPU, or its MIG instances when MIG is on."""
    out: list[GpuInfo] = []
    for p in ordered:
        instances = _mig_instances(nvml, p)
        out += [GpuInfo(p["uuid"], p["name"], p["pci"])] if instances is None else instances
    return out


def _match(token: str, ordered: list[dict], enumerated: list[GpuInfo]) -> GpuInfo | None:
    if token.isdigit():  # CUDA accepts plain non-negative indices only ("-1" is invalid)
        index = int(token)
        return enumerated[index] if index < len(enumerated) else None
    if not _UUID_TOKEN.match(token):
        return None
    if token.startswith("GPU-"):
        found = [GpuInfo(p["uuid"], p["name"], p["pci"]) for p in ordered if p["uuid"].startswith(token)]
    else:
        found = [m for m in enumerated if m.parent_uuid is not None and m.uuid.startswith(token)]
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
        enumerated = _cuda_devices(nvml, ordered)
        mask = environ.get("CUDA_VISIBLE_DEVICES")
        if mask is None:
            return enumerated
        visible: list[GpuInfo] = []
        for token in mask.split(","):
            gpu = _match(token.strip(), ordered, enumerated)
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
            raise ValueError(f"devices: expected CUDA indices (0, 1, …) or 'cuda:N' strings, found {entry!r}")
        if not 0 <= index < len(visible):
            raise ValueError(f"devices: unknown device {entry!r}; available: {available}")
        gpu = replace(visible[index], label=cuda_label(index))
        if gpu in out:
            raise ValueError(f"devices: {entry!r} is listed twice")
        out.append(gpu)
    return out


def unique_devices(per_rank: Sequence[Any]) -> list[str]:
    """The distinct CUDA devices of a per-rank device list, in first-use order.

    Two ranks (or two replicas) on one GPU share it: ``["cuda:0", "cuda:0", "cuda:1"]`` →
    ``["cuda:0", "cuda:1"]``, so the sampler reads each physical device once. Non-CUDA
    entries ("cpu") are dropped: the CPU rows come from the CPU backend.
    """
    return list(dict.fromkeys(str(d) for d in per_rank if str(d).startswith("cuda")))


def rank_devices(per_rank: Sequence[Any]) -> dict[str, list[int]]:
    """``{device: [ranks on it]}`` of a per-rank device list (CUDA entries only)."""
    out: dict[str, list[int]] = {}
    for rank, device in enumerate(per_rank):
        if str(device).startswith("cuda"):
            out.setdefault(str(device), []).append(rank)
    return out
