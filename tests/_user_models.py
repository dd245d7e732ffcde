"""A user's workload module as the specs tests write it into a temporary directory: a model of two
input tensors with its own loss, a factory with keyword arguments, a Workload instance, and a
non-workload attribute."""

SOURCE = """
import torch
from torch import nn

import dpbench


class TwoInputNet(nn.Module):
    def __init__(self, hidden, depth):
        super().__init__()
        layers = [nn.Linear(8, hidden), nn.Tanh()]
        for _ in range(depth - 1):
            layers += [nn.Linear(hidden, hidden), nn.Tanh()]
        self.body = nn.Sequential(*layers)
        self.side = nn.Linear(3, hidden)
        self.head = nn.Linear(hidden, 1)

    def forward(self, x, z):
        return self.head(self.body(x) + self.side(z)).squeeze(1)


def batch(step, global_batch, seed):
    g = torch.Generator().manual_seed(seed * 1000 + step)
    x = torch.randn(global_batch, 8, generator=g)
    z = torch.randn(global_batch, 3, generator=g)
    return (x, z), x.sum(dim=1) - z.sum(dim=1)


def tiny_net(hidden: int = 16, depth: int = 2) -> dpbench.Workload:
    # lambdas on purpose: the spec's workers find them again by importing this module
    return dpbench.Workload(
        model=lambda: TwoInputNet(hidden, depth),
        batch=batch,
        loss=lambda output, target: ((output - target) ** 2).mean(),
        name="tiny",
        params={"hidden": hidden, "depth": depth},
    )


fixed = tiny_net(hidden=4, depth=1)
not_a_workload = 42


def returns_int():
    return 7
"""
