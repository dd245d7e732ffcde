"""``resnet18``: d2l's ResNet-18 adapted to 1×28×28 Fashion-MNIST (the multi-GPU concise chapter).

Differences from torchvision's ResNet-18, as d2l makes them for small images: the stem is a
3×3 stride-1 convolution with 64 channels + BatchNorm + ReLU and has no max-pool; the residual
shortcut of a down-sampling block is a bare 1×1 strided convolution (no BatchNorm). Four stages
of two residual blocks (64, 128, 256, 512 channels; stages 2–4 halve the resolution:
28 → 28 → 14 → 7 → 4), global average pooling, and one linear layer to 10 classes.

BatchNorm keeps running statistics and normalises with *per-replica* batch statistics in
training mode, so this workload is ``stateful``: strategies are not expected to match
``single`` exactly (see the strategies' BatchNorm notes).
"""

from __future__ import annotations

from functools import partial

import torch
from torch import nn
from torch.nn import functional as F

from dpbench.workloads._checks import positive_int, positive_ints
from dpbench.workloads._variants import variant
from dpbench.workloads.base import Workload, cross_entropy
from dpbench.workloads.data import IMAGE_SHAPE, NUM_CLASSES, image_batch_factory

__all__ = ["Residual", "ResNet18", "resnet18_workload"]


class Residual(nn.Module):
    """d2l's residual block: conv3×3(stride) → BN → ReLU → conv3×3 → BN, plus the shortcut, → ReLU."""

    def __init__(self, in_channels: int, out_channels: int, *, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1, stride=stride)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, kernel_size=3, padding=1)
        self.bn2 = nn.BatchNorm2d(out_channels)
        # A 1×1 convolution matches shape when the block changes channels or resolution.
        needs_projection = stride != 1 or in_channels != out_channels
        self.shortcut = nn.Conv2d(in_channels, out_channels, kernel_size=1, stride=stride) if needs_projection else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.shortcut is None else self.shortcut(x)))


class ResNet18(nn.Module):
    def __init__(
        self,
        *,
        widths: tuple[int, ...] = (64, 128, 256, 512),
        blocks_per_stage: int = 2,
        num_classes: int = NUM_CLASSES,
    ) -> None:
        super().__init__()
        widths = positive_ints("widths", widths)
        blocks_per_stage = positive_int("blocks_per_stage", blocks_per_stage)
        num_classes = positive_int("num_classes", num_classes)
        self.stem = nn.Sequential(
            nn.Conv2d(IMAGE_SHAPE[0], widths[0], kernel_size=3, stride=1, padding=1),
            nn.BatchNorm2d(widths[0]),
            nn.ReLU(),
        )
        stages = []
        in_channels = widths[0]
        for index, width in enumerate(widths):
            # The first stage keeps the stem's resolution; every later one halves it.
            blocks = [Residual(in_channels, width, stride=1 if index == 0 else 2)]
            blocks += [Residual(width, width) for _ in range(blocks_per_stage - 1)]
            stages.append(nn.Sequential(*blocks))
            in_channels = width
        self.stages = nn.Sequential(*stages)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(), nn.Linear(in_channels, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.stages(self.stem(x)))


def resnet18_workload(
    *, widths: tuple[int, ...] = (64, 128, 256, 512), blocks_per_stage: int = 2, noise: float = 0.5
) -> Workload:
    """d2l's modified ResNet-18 on synthetic Fashion-MNIST-shaped images (``stateful``: BatchNorm).

    Smaller variants (e.g. ``widths=(8, 16, 32, 64)``) keep the structure at a fraction of the cost.
    """
    widths = positive_ints("widths", widths)
    blocks_per_stage = positive_int("blocks_per_stage", blocks_per_stage)
    batch = image_batch_factory(noise=noise)
    name, params = variant(
        "resnet18", resnet18_workload, widths=widths, blocks_per_stage=blocks_per_stage, noise=batch.keywords["noise"]
    )
    return Workload(
        model=partial(ResNet18, widths=widths, blocks_per_stage=blocks_per_stage),
        batch=batch,
        loss=cross_entropy,
        name=name,
        params=params,
        description=(
            f"d2l ResNet-18 for 1×28×28 (3×3 stem, no max-pool, BatchNorm), widths {list(widths)}, "
            f"{blocks_per_stage} blocks per stage, on synthetic images"
        ),
        stateful=True,
        tags=("image", "classification", "batchnorm"),
    )
