"""Small module-level workloads for the strategy and launcher tests.

Module-level so spawned workers can unpickle them: children inherit the parent's
``sys.path``, where pytest put this directory.
"""

from __future__ import annotations

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


MLP = Workload(model=tiny_mlp, batch=random_batch, loss=cross_entropy, name="toy-mlp")
BN = Workload(model=tiny_bn, batch=random_batch, loss=cross_entropy, name="toy-bn", stateful=True)
