"""A parameter no replica uses gets a zero ``.grad`` under DataParallel, as under torch's.

torch's Broadcast backward reduces materialised zeros, so ``torch.nn.DataParallel`` leaves an
unused parameter with ``grad == 0`` where the plain module (dpbench's ``single``) leaves
``None``. The difference shows in training: optimizers skip a ``None`` grad but apply weight
decay (AdamW, SGD) and momentum to a zero one. The reference is ``torch.nn.DataParallel`` where
two GPUs are visible, else the plain module with its ``None`` grads replaced by zeros before
each step (the semantics torch's DataParallel has).
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from dpbench.parallel import DataParallel

from .torch_mapping import DeviceMap

STEPS = 3
OPTIMIZERS = {
    "adamw": lambda params: torch.optim.AdamW(params, lr=0.1, weight_decay=0.1),
    "sgd-momentum": lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=0.01),
}


class WithUnusedHead(nn.Module):
    """``head`` takes part only from the second step on: its zero grads of step 1 matter later."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Linear(4, 3)
        self.head = nn.Linear(3, 3)
        self.use_head = False

    def forward(self, x):
        y = self.body(x)
        return self.head(y) if self.use_head else y


def train(model: nn.Module, module: WithUnusedHead, make_optimizer, device: torch.device, *, zero_fill: bool):
    """STEPS optimizer steps on fixed batches; returns the grads seen after the first backward."""
    opt = make_optimizer(module.parameters())
    torch.manual_seed(1)
    batches = [torch.randn(6, 4) for _ in range(STEPS)]
    first_grads = None
    for step, x in enumerate(batches):
        module.use_head = step > 0
        opt.zero_grad()
        model(x.to(device)).pow(2).sum().backward()
        if first_grads is None:
            first_grads = {n: None if p.grad is None else p.grad.clone() for n, p in module.named_parameters()}
        if zero_fill:
            for p in module.parameters():
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
        opt.step()
    return first_grads


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_unused_parameter_trains_as_under_torch_data_parallel(device_map: DeviceMap, optimizer):
    make_optimizer = OPTIMIZERS[optimizer]
    ours = WithUnusedHead().to(device_map.d0)
    reference = copy.deepcopy(ours)
    with DataParallel(ours, device_map.ids) as dp:
        first = train(dp, ours, make_optimizer, device_map.d0, zero_fill=False)
    if device_map.is_cuda:
        torch_dp = nn.DataParallel(reference, list(device_map.ids))
        train(torch_dp, reference, make_optimizer, device_map.d0, zero_fill=False)
    else:
        train(reference, reference, make_optimizer, device_map.d0, zero_fill=True)

    for name in ("head.weight", "head.bias"):
        assert first[name] is not None and not first[name].any(), f"{name}: expected a zero grad, found {first[name]}"
    for (name, p), q in zip(ours.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=f"{name} differs from the reference")


def test_plain_module_leaves_unused_grads_none():
    """The documented difference: ``single`` (the plain module) gives None, DataParallel zeros."""
    module = WithUnusedHead()
    first = train(module, module, OPTIMIZERS["adamw"], torch.device("cpu"), zero_fill=False)
    assert first["head.weight"] is None and first["head.bias"] is None
    assert first["body.weight"] is not None


def test_frozen_parameters_get_no_grad():
    """Zeros only where a grad is required: a frozen (requires_grad=False) parameter stays None."""
    module = WithUnusedHead()
    module.head.requires_grad_(False)
    with DataParallel(module, ["cpu", "cpu"]) as dp:
        dp(torch.randn(4, 4)).sum().backward()
    assert module.head.weight.grad is None and module.body.weight.grad is not None
