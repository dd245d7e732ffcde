"""Small module-level workloads for the strategy and launcher tests.

Module-level so spawned workers can unpickle them: children inherit the parent's
``sys.path``, where pytest put this directory.
"""
from __future__ import annotations

import functools
import time

import torch
import torch.nn.functional as F
from torch import nn

from dpbench.workloads.base import Workload

IN_FEATURES = 12
CLASSES = 5


def tiny_mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(IN_FEATURES, 16), nn.Tanh(), nn.Linear(16, CLASSES))


def tiny_bn() -> nn.Module:
    return nn.Sequential(nn.Linear(IN_FEATURES, 16), nn.BatchNorm1d(16), nn.Tanh(), nn.Linear(16, CLASSES))


def random_batch(step: int, global_batch: int, seed: int):
    gen = torch.Generator().manual_seed(seed * 100_003 + step)
    x = torch.randn(global_batch, IN_FEATURES, generator=gen)
    y = torch.randint(0, CLASSES, (global_batch,), generator=gen)
    return x, y


def cross_entropy(output, target):
    return F.cross_entropy(output, target)


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


class FaultyMLP(nn.Module):
    """Misbehaves in forward on one rank: ``fault`` is "raise", "hang" or "exit"."""

    def __init__(self, fault: str, rank: int):
        super().__init__()
        self.body = tiny_mlp()
        self.fault, self.bad_rank = fault, rank

    def forward(self, x):
        if _rank() == self.bad_rank:
            if self.fault == "raise":
                raise ValueError(f"injected failure on rank {self.bad_rank}")
            if self.fault == "hang":
                time.sleep(600)
        return self.body(x)


def faulty(fault: str, rank: int) -> nn.Module:
    return FaultyMLP(fault, rank)


MLP = Workload(model=tiny_mlp, batch=random_batch, loss=cross_entropy, name="toy-mlp")
BN = Workload(model=tiny_bn, batch=random_batch, loss=cross_entropy, name="toy-bn", stateful=True)


def faulty_workload(fault: str, rank: int) -> Workload:
    return Workload(model=functools.partial(faulty, fault, rank), batch=random_batch,
                    loss=cross_entropy, name=f"toy-{fault}-rank{rank}")
