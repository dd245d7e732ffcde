"""``mlp``: wide fully connected layers on flattened images — many parameters per FLOP.

The point of this workload is communication: its gradients are large relative to its compute,
so it shows the cost of gradient synchronisation more than any other registered workload.
"""

from __future__ import annotations

from functools import partial

from torch import nn

from dpbench.workloads._checks import positive_int
from dpbench.workloads._variants import variant
from dpbench.workloads.base import Workload, cross_entropy
from dpbench.workloads.data import IMAGE_SHAPE, NUM_CLASSES, image_batch_factory

__all__ = ["MLP", "mlp_workload"]

_IN_FEATURES = IMAGE_SHAPE[0] * IMAGE_SHAPE[1] * IMAGE_SHAPE[2]


class MLP(nn.Module):
    """Flatten → ``layers`` × (Linear(·, hidden) → ReLU) → Linear(hidden, num_classes)."""

    def __init__(
        self, *, in_features: int = _IN_FEATURES, hidden: int = 1024, layers: int = 3, num_classes: int = NUM_CLASSES
    ) -> None:
        super().__init__()
        in_features = positive_int("in_features", in_features)
        hidden = positive_int("hidden", hidden)
        layers = positive_int("layers", layers)
        num_classes = positive_int("num_classes", num_classes)
        blocks: list[nn.Module] = [nn.Flatten()]
        width = in_features
        for _ in range(layers):
            blocks += [nn.Linear(width, hidden), nn.ReLU()]
            width = hidden
        blocks.append(nn.Linear(width, num_classes))
        self.net = nn.Sequential(*blocks)

    def forward(self, x):
        return self.net(x)


def mlp_workload(*, hidden: int = 1024, layers: int = 3, noise: float = 0.5) -> Workload:
    """An ``MLP`` (784 → ``hidden`` × ``layers`` → 10) on synthetic Fashion-MNIST-shaped images."""
    hidden = positive_int("hidden", hidden)
    layers = positive_int("layers", layers)
    batch = image_batch_factory(noise=noise)
    name, params = variant("mlp", mlp_workload, hidden=hidden, layers=layers, noise=batch.keywords["noise"])
    return Workload(
        model=partial(MLP, hidden=hidden, layers=layers),
        batch=batch,
        loss=cross_entropy,
        name=name,
        params=params,
        description=f"MLP 784→{hidden}×{layers}→10, ReLU, on synthetic 1×28×28 images",
        tags=("image", "classification", "communication-heavy"),
    )
