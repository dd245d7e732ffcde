"""Small modules and reference checks shared by the dpbench.parallel tests."""

from __future__ import annotations

import copy
from collections import namedtuple
from dataclasses import dataclass

import torch
from torch import nn

Pair = namedtuple("Pair", ["logits", "hidden"])


@dataclass
class Result:
    logits: torch.Tensor
    name: str
    scale: float


def mlp(seed: int = 0, width: int = 8) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, width), nn.Tanh(), nn.Linear(width, 3))


class TwoInputs(nn.Module):
    """Positional tuple input, a keyword tensor and a non-tensor keyword (passed by reference)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.a = nn.Linear(4, 3)
        self.b = nn.Linear(2, 3)

    def forward(self, xy, *, z=None, scale=1.0):
        x, y = xy
        out = self.a(x) * scale + self.b(y)
        return out if z is None else out * z


class DictIn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(2)
        self.lin = nn.Linear(4, 3)

    def forward(self, batch):
        return self.lin(batch["x"]) + batch["bias"]


class StructOut(nn.Module):
    """Returns dict / namedtuple / dataclass outputs with nested and non-tensor leaves."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.lin = nn.Linear(4, 3)
        self.kind = kind

    def forward(self, x):
        logits = self.lin(x)
        if self.kind == "dict":
            return {
                "logits": logits,
                "aux": {"hidden": torch.tanh(logits), "norm": logits.pow(2).sum()},
                "tag": "ok",
                "none": None,
            }
        if self.kind == "namedtuple":
            return Pair(logits, torch.tanh(logits))
        return Result(logits=logits, name="r", scale=2.0)


def clone(module: nn.Module) -> nn.Module:
    return copy.deepcopy(module)


def grads(module: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}


def assert_same_grads(a: nn.Module, b: nn.Module, *, atol: float = 1e-6) -> None:
    ga, gb = grads(a), grads(b)
    assert ga.keys() == gb.keys() and ga, f"parameters with grads differ: {sorted(ga)} vs {sorted(gb)}"
    for name in ga:
        torch.testing.assert_close(ga[name], gb[name], atol=atol, rtol=1e-5, msg=lambda m, name=name: f"{name}: {m}")
