"""A test-side workload whose rank 1 sleeps 20 ms before every forward (the straggler).

Module-level so spawned workers can unpickle it (pytest put this directory on sys.path).
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from dpbench.workloads.base import Workload

LATE_S = 0.020
IN_FEATURES, CLASSES = 12, 5


class LateOnRankOne(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(IN_FEATURES, 16), nn.Tanh(), nn.Linear(16, CLASSES))

    def forward(self, x):
        if dist.is_initialized() and dist.get_rank() == 1:
            time.sleep(LATE_S)
        return self.body(x)


def batch(step: int, global_batch: int, seed: int):
    gen = torch.Generator().manual_seed(seed * 100_003 + step)
    return torch.randn(global_batch, IN_FEATURES, generator=gen), torch.randint(
        0, CLASSES, (global_batch,), generator=gen
    )


def loss(output, target):
    return F.cross_entropy(output, target)


SLOW_RANK_ONE = Workload(model=LateOnRankOne, batch=batch, loss=loss, name="late-rank-1")
