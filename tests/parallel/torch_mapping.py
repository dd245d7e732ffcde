"""How the ported PyTorch DataParallel tests map upstream's GPUs onto devices here.

Upstream's tests run on ``cuda:0``/``cuda:1``; dpbench also runs them on CPU replicas. A
:class:`DeviceMap` stands for one mapping: ``ids`` replaces upstream's ``(0, 1)``, ``all_ids``
its ``range(torch.cuda.device_count())``, ``amp`` its CUDA autocast. The ``device_map`` fixture
(conftest.py) yields the CPU mapping everywhere and the original CUDA mapping where two GPUs
are visible (skipped with the reason elsewhere).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

__all__ = ["DeviceMap", "CPU_MAP", "cuda_map", "MAPPING_NAMES"]

MAPPING_NAMES = ["cpu-replicas", "cuda"]


@dataclass(frozen=True, kw_only=True)
class DeviceMap:
    name: str
    """Test id: ``cpu-replicas`` or ``cuda``."""
    ids: tuple
    """Upstream's ``(0, 1)``: two replicas."""
    all_ids: tuple
    """Upstream's ``range(torch.cuda.device_count())``: three CPU replicas, or every GPU."""
    amp: tuple[str, torch.dtype]
    """(device type, dtype) replacing upstream's ``torch.cuda.amp.autocast()``."""

    def device(self, device_id) -> torch.device:
        """The ``torch.device`` an entry of ``ids`` names (upstream: ``cuda:<id>``)."""
        return torch.device("cuda", device_id) if isinstance(device_id, int) else torch.device(device_id)

    @property
    def d0(self) -> torch.device:
        return self.device(self.ids[0])

    @property
    def d1(self) -> torch.device:
        return self.device(self.ids[1])

    @property
    def is_cuda(self) -> bool:
        return self.d0.type == "cuda"


CPU_MAP = DeviceMap(name="cpu-replicas", ids=("cpu", "cpu"), all_ids=("cpu",) * 3, amp=("cpu", torch.bfloat16))


def cuda_map() -> DeviceMap:
    """The original mapping; skips the test (with the reason) without two CUDA devices."""
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count < 2:
        pytest.skip(f"the original CUDA mapping needs 2 CUDA devices; found {count}")
    return DeviceMap(name="cuda", ids=(0, 1), all_ids=tuple(range(count)), amp=("cuda", torch.float16))
