"""``lenet``: the LeNet of d2l's "multiple GPUs from scratch" chapter, written as an ``nn.Module``.

d2l defines it functionally (explicit weight tensors); the layers are: conv 20@3×3 → ReLU →
avg-pool 2/2 → conv 50@5×5 → ReLU → avg-pool 2/2 → flatten (50·4·4 = 800) → 128 → ReLU → 10.
On a 1×28×28 input the feature maps are 20×26×26 → 20×13×13 → 50×9×9 → 50×4×4.
"""

from __future__ import annotations

from functools import partial

from torch import nn

from dpbench.workloads._checks import positive_int
from dpbench.workloads._variants import variant
from dpbench.workloads.base import Workload, cross_entropy
from dpbench.workloads.data import IMAGE_SHAPE, NUM_CLASSES, image_batch_factory

__all__ = ["LeNet", "lenet_workload"]


def _after_conv_and_pool(size: int, kernel: int) -> int:
    # valid convolution, then 2×2 average pooling with stride 2 (floor), as in d2l
    return (size - kernel + 1) // 2


class LeNet(nn.Module):
    def __init__(self, *, conv1: int = 20, conv2: int = 50, hidden: int = 128, num_classes: int = NUM_CLASSES) -> None:
        super().__init__()
        conv1 = positive_int("conv1", conv1)
        conv2 = positive_int("conv2", conv2)
        hidden = positive_int("hidden", hidden)
        num_classes = positive_int("num_classes", num_classes)
        side = _after_conv_and_pool(_after_conv_and_pool(IMAGE_SHAPE[1], 3), 5)
        self.features = nn.Sequential(
            nn.Conv2d(IMAGE_SHAPE[0], conv1, kernel_size=3),
            nn.ReLU(),
            nn.AvgPool2d(kernel_size=2, stride=2),
            nn.Conv2d(conv1, conv2, kernel_size=5),
            nn.ReLU(),
            nn.AvgPool2d(kernel_size=2, stride=2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(conv2 * side * side, hidden),
            nn.ReLU(),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x):
        return self.classifier(self.features(x))


def lenet_workload(*, conv1: int = 20, conv2: int = 50, hidden: int = 128, noise: float = 0.5) -> Workload:
    """d2l's multi-GPU LeNet on synthetic Fashion-MNIST-shaped images."""
    conv1, conv2, hidden = positive_int("conv1", conv1), positive_int("conv2", conv2), positive_int("hidden", hidden)
    batch = image_batch_factory(noise=noise)
    name, params = variant(
        "lenet", lenet_workload, conv1=conv1, conv2=conv2, hidden=hidden, noise=batch.keywords["noise"]
    )
    return Workload(
        model=partial(LeNet, conv1=conv1, conv2=conv2, hidden=hidden),
        batch=batch,
        loss=cross_entropy,
        name=name,
        params=params,
        description=f"d2l LeNet (conv {conv1}@3×3, conv {conv2}@5×5, avg-pool, {hidden}, 10) "
        "on synthetic 1×28×28 images",
        tags=("image", "classification"),
    )
