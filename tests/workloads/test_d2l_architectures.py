"""LeNet and ResNet-18 have the layers and feature-map shapes d2l specifies for 1×28×28 inputs."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dpbench.workloads import get_workload
from dpbench.workloads.lenet import LeNet
from dpbench.workloads.resnet import Residual, ResNet18


def _shapes_after_each_layer(layers: nn.Sequential, x: torch.Tensor) -> list[tuple[int, ...]]:
    shapes = []
    for layer in layers:
        x = layer(x)
        shapes.append(tuple(x.shape))
    return shapes


def test_lenet_layers_and_shapes_match_d2l():
    torch.manual_seed(0)
    model = get_workload("lenet").model()
    assert isinstance(model, LeNet)
    layers = nn.Sequential(*model.features, *model.classifier)
    kinds = [type(layer).__name__ for layer in layers]
    assert kinds == [
        "Conv2d",
        "ReLU",
        "AvgPool2d",
        "Conv2d",
        "ReLU",
        "AvgPool2d",
        "Flatten",
        "Linear",
        "ReLU",
        "Linear",
    ]
    conv1, conv2 = model.features[0], model.features[3]
    assert (conv1.in_channels, conv1.out_channels, conv1.kernel_size, conv1.padding) == (1, 20, (3, 3), (0, 0))
    assert (conv2.in_channels, conv2.out_channels, conv2.kernel_size, conv2.padding) == (20, 50, (5, 5), (0, 0))
    for pool in (model.features[2], model.features[5]):
        assert (pool.kernel_size, pool.stride) == (2, 2)
    shapes = _shapes_after_each_layer(layers, torch.zeros(2, 1, 28, 28))
    assert shapes == [
        (2, 20, 26, 26),
        (2, 20, 26, 26),
        (2, 20, 13, 13),
        (2, 50, 9, 9),
        (2, 50, 9, 9),
        (2, 50, 4, 4),
        (2, 800),
        (2, 128),
        (2, 128),
        (2, 10),
    ]
    # d2l's parameter tensors: W1 [20,1,3,3], b1 [20], W2 [50,20,5,5], b2 [50], W3 [800,128],
    # b3 [128], W4 [128,10], b4 [10] (nn.Linear stores its weight transposed).
    assert [tuple(p.shape) for p in model.parameters()] == [
        (20, 1, 3, 3),
        (20,),
        (50, 20, 5, 5),
        (50,),
        (128, 800),
        (128,),
        (10, 128),
        (10,),
    ]


@pytest.mark.slow
def test_resnet18_stem_stages_and_head_match_d2l():
    torch.manual_seed(0)
    model = get_workload("resnet18").model()
    assert isinstance(model, ResNet18)
    stem_conv, stem_bn, stem_act = model.stem
    assert (stem_conv.in_channels, stem_conv.out_channels) == (1, 64)
    assert (stem_conv.kernel_size, stem_conv.stride, stem_conv.padding) == ((3, 3), (1, 1), (1, 1))
    assert isinstance(stem_bn, nn.BatchNorm2d) and isinstance(stem_act, nn.ReLU)
    assert not any(isinstance(m, nn.MaxPool2d) for m in model.modules())  # d2l drops the max-pool
    assert [len(stage) for stage in model.stages] == [2, 2, 2, 2]
    assert all(isinstance(block, Residual) for stage in model.stages for block in stage)
    # Only the first block of stages 2–4 changes shape, so only they get a 1×1 strided shortcut.
    shortcuts = [block.shortcut for stage in model.stages for block in stage]
    assert [s is not None for s in shortcuts] == [False, False, True, False, True, False, True, False]
    for s in filter(None, shortcuts):
        assert s.kernel_size == (1, 1) and s.stride == (2, 2)
    assert sum(isinstance(m, nn.BatchNorm2d) for m in model.modules()) == 1 + 8 * 2

    model.eval()
    x = torch.zeros(2, 1, 28, 28)
    shapes = [tuple(model.stem(x).shape)]
    y = model.stem(x)
    for stage in model.stages:
        y = stage(y)
        shapes.append(tuple(y.shape))
    assert shapes == [(2, 64, 28, 28), (2, 64, 28, 28), (2, 128, 14, 14), (2, 256, 7, 7), (2, 512, 4, 4)]
    pool, flatten, fc = model.head
    assert isinstance(pool, nn.AdaptiveAvgPool2d) and isinstance(flatten, nn.Flatten)
    assert (fc.in_features, fc.out_features) == (512, 10)
    assert tuple(model(x).shape) == (2, 10)


def test_residual_block_adds_its_input():
    # With the convolutions zeroed, a same-shape block is relu(BN(0) + x) = relu(beta + x) = relu(x).
    torch.manual_seed(0)
    block = Residual(4, 4).eval()
    for conv in (block.conv1, block.conv2):
        nn.init.zeros_(conv.weight)
        nn.init.zeros_(conv.bias)
    x = torch.randn(2, 4, 5, 5)
    assert torch.allclose(block(x), torch.relu(x))
