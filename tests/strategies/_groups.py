"""A one-rank process group for strategy tests that need one in this process (import the fixture)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import torch.distributed as dist


@pytest.fixture
def one_rank_group(tmp_path):
    """A one-rank gloo group in this process (DDP needs one); destroyed afterwards."""
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1, timeout=timedelta(seconds=30))
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()
