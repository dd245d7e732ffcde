"""Shared helpers for the workload tests (a plain module: imported by name, not a conftest)."""

from __future__ import annotations

import torch


def call_model(model: torch.nn.Module, inputs):
    """Call ``model`` the way strategies do: tuple inputs are passed positionally."""
    return model(*inputs) if isinstance(inputs, tuple) else model(inputs)


def sgd_losses(workload, *, steps: int, batch: int, lr: float = 0.1, seed: int = 0) -> list[float]:
    """Plain SGD on ``workload`` from seeded weights; the loss of every step."""
    torch.manual_seed(seed)
    model = workload.model()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        inputs, target = workload.batch(step, batch, seed)
        loss = workload.loss(call_model(model, inputs), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses
