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


# -- a planted difference: one rank trains with another learning rate -------------------------
PLANTED_LR_FACTOR = 2.0
_planted = []


def _rank_one_lr(optimizer, args, kwargs):
    """torch's global optimizer step pre-hook: before each step, scale this rank's learning rate
    once (the first time it sees each param group)."""
    for group in optimizer.param_groups:
        if not group.get("planted"):
            group["lr"] *= PLANTED_LR_FACTOR
            group["planted"] = True


def rank_one_lr_mlp() -> nn.Module:
    """tiny_mlp, and on rank 1 of a process group every optimizer steps with PLANTED_LR_FACTOR × lr:
    planted through torch's public optimizer hook, so nothing in dpbench knows."""
    import torch.distributed as dist
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    if dist.is_available() and dist.is_initialized() and dist.get_rank() == 1 and not _planted:
        _planted.append(register_optimizer_step_pre_hook(_rank_one_lr))
    return tiny_mlp()


# Named as MLP: the same recipe, so its fingerprint is compared with MLP's single.
RANK_ONE_LR = Workload(model=rank_one_lr_mlp, batch=random_batch, loss=cross_entropy, name="toy-mlp")
