"""Device parsing shared by every pipeline step, so the check is written once.

torch.nn.parallel duplicates its device handling between the class and the function and only
accepts CUDA; here one parser accepts an int (CUDA index), ``"cuda:N"``, ``"cuda"``,
``"cpu"`` or a ``torch.device``, and repeated devices are allowed (several replicas on one
device).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import chain
from typing import Any

import torch
from torch import nn

__all__ = ["DeviceLike", "parse_device", "parse_devices", "default_devices", "check_module_device", "synchronize"]

DeviceLike = int | str | torch.device

_SUPPORTED_TYPES = ("cpu", "cuda")


def _describe(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})"


def parse_device(value: Any, *, argument: str = "device", allow_minus_one: bool = False) -> torch.device:
    """Turn one device spec into a ``torch.device`` with an explicit index on CUDA.

    ``argument`` names the caller's parameter in the error message. ``allow_minus_one`` accepts
    ``-1`` as "the CPU", as ``torch.nn.parallel.data_parallel`` documents for ``output_device``.
    """
    if type(value) is torch.device and value.type == "cpu" and value.index is None:
        return value  # fast path: already parsed (DataParallel passes its own devices every forward)
    if isinstance(value, bool):  # bool is an int subclass; True is never a meaningful device
        raise TypeError(
            f"{argument}: expected an int CUDA index, 'cuda:N', 'cpu' or a torch.device, got {_describe(value)}"
        )
    if isinstance(value, int):
        if value == -1 and allow_minus_one:
            return torch.device("cpu")
        if value < 0:
            raise ValueError(f"{argument}: expected a CUDA index >= 0, got {value}")
        device = torch.device("cuda", value)
    elif isinstance(value, str):
        try:
            device = torch.device(value)
        except RuntimeError as exc:
            raise ValueError(
                f"{argument}: expected an int CUDA index, 'cuda:N' or 'cpu', got {value!r} ({exc})"
            ) from None
    elif isinstance(value, torch.device):
        device = value
    else:
        raise TypeError(
            f"{argument}: expected an int CUDA index, 'cuda:N', 'cpu' or a torch.device, got {_describe(value)}"
        )

    if device.type not in _SUPPORTED_TYPES:
        raise ValueError(f"{argument}: expected a device of type {' or '.join(_SUPPORTED_TYPES)}, got {str(device)!r}")
    if device.type == "cpu":
        return torch.device("cpu")  # "cpu:0" and "cpu" are the same place; compare equal from here on
    if not torch.cuda.is_available():
        raise ValueError(f"{argument}: got {str(device)!r} but CUDA is not available on this machine; use 'cpu'")
    index = torch.cuda.current_device() if device.index is None else device.index
    count = torch.cuda.device_count()
    if index >= count:
        raise ValueError(
            f"{argument}: got {str(device)!r} but only {count} CUDA device(s) are visible (indices 0..{count - 1})"
        )
    return torch.device("cuda", index)


def _is_parsed(value: Any) -> bool:
    if type(value) is not torch.device:
        return False
    if value.type == "cpu":
        return value.index is None
    return value.type == "cuda" and value.index is not None and value.index < torch.cuda.device_count()


def default_devices() -> list[torch.device]:
    """All visible CUDA devices, or ``[cpu]`` on a machine without CUDA."""
    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        return [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    return [torch.device("cpu")]


def parse_devices(values: Sequence[DeviceLike] | None, *, argument: str = "device_ids") -> list[torch.device]:
    """Parse a list of devices; ``None`` means :func:`default_devices`; empty is an error."""
    if values is None:
        return default_devices()
    if isinstance(values, (str, int, torch.device)):
        raise TypeError(
            f"{argument}: expected a list of devices, got a single device {_describe(values)}; wrap it in a list"
        )
    values = list(values)
    if values and all(_is_parsed(v) for v in values):
        return values  # fast path: DataParallel passes its already-parsed devices every forward
    if not values:
        raise ValueError(f"{argument}: expected at least one device, got an empty list")
    return [parse_device(v, argument=f"{argument}[{i}]") for i, v in enumerate(values)]


def check_module_device(module: nn.Module, device: torch.device) -> None:
    """Raise torch's error when a parameter or buffer is not on ``device_ids[0]``."""
    # Runs on every forward, so it walks the modules' own dicts: module.parameters() and
    # module.buffers() cost ~3 µs per tensor through their generic generator.
    stack, seen = [module], set()
    while stack:
        mod = stack.pop()
        if id(mod) in seen:
            continue
        seen.add(id(mod))
        for t in chain(mod._parameters.values(), mod._buffers.values()):
            if t is not None and t.device != device:
                raise RuntimeError(
                    "module must have its parameters and buffers "
                    f"on device {device} (device_ids[0]) but found one of "
                    f"them on device: {t.device}"
                )
        stack.extend(child for child in mod._modules.values() if child is not None)


def synchronize(devices: Iterable[torch.device]) -> None:
    """Wait for queued work on every CUDA device in ``devices`` (no-op on CPU, where work is eager)."""
    for index in sorted({d.index for d in devices if d.type == "cuda"}):
        torch.cuda.synchronize(index)
