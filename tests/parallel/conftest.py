"""Fixtures of the dpbench.parallel tests."""

from __future__ import annotations

import pytest

from .torch_mapping import CPU_MAP, MAPPING_NAMES, DeviceMap, cuda_map


@pytest.fixture(params=MAPPING_NAMES)
def device_map(request: pytest.FixtureRequest) -> DeviceMap:
    """Upstream's GPUs on CPU replicas, and on two GPUs where they are visible."""
    return CPU_MAP if request.param == "cpu-replicas" else cuda_map()
