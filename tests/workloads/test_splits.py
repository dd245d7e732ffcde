"""Epoch-aligned batches of a split, and the one evaluation every strategy shares."""

from __future__ import annotations

from functools import partial

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dpbench.workloads.base import Workload
from dpbench.workloads.data import image_batch
from dpbench.workloads.mlp import MLP
from dpbench.workloads.splits import EVAL_BATCH, InMemory, Split, epoch_batch, evaluate_state, steps_per_epoch


def _indexed_split(n: int) -> Split:
    # Every image holds its own index as its pixel value, so a batch says which samples it took.
    images = torch.arange(n, dtype=torch.uint8).reshape(n, 1, 1, 1).expand(n, 1, 2, 2).contiguous()
    return Split(dataset="indexed", train=True, load=InMemory(images, torch.arange(n) % 10), pixel_max=255.0)


def _taken(x: torch.Tensor) -> list[int]:
    return (x[:, 0, 0, 0] * 255).round().to(torch.int64).tolist()


def test_an_epoch_is_one_pass_over_a_fresh_shuffle_in_full_batches():
    split = _indexed_split(50)
    per_epoch = steps_per_epoch(50, 8)
    assert per_epoch == 6  # 48 samples; the last 2 of each permutation are dropped
    epochs = [
        [i for step in range(e * 6, (e + 1) * 6) for i in _taken(epoch_batch(step, 8, 3, split=split)[0])]
        for e in range(3)
    ]
    for taken in epochs:
        assert len(taken) == 48 and len(set(taken)) == 48
    assert epochs[0] != epochs[1] != epochs[2]  # every epoch its own order
    x, y = epoch_batch(7, 8, 3, split=split)
    assert y.tolist() == [i % 10 for i in _taken(x)]  # labels travel with their images
    again, _ = epoch_batch(7, 8, 3, split=split)
    assert torch.equal(x, again)  # a function of (step, batch, seed) alone
    assert _taken(epoch_batch(7, 8, 4, split=split)[0]) != _taken(x)  # the seed shuffles differently


def test_pixels_reach_the_model_in_the_unit_interval():
    split = _indexed_split(20)
    x, _ = epoch_batch(0, 20, 0, split=split)
    assert x.dtype == torch.float32 and float(x.min()) == 0.0 and float(x.max()) == pytest.approx(19 / 255)


def test_a_batch_larger_than_the_split_is_refused_with_both_sizes():
    with pytest.raises(ValueError, match=r"global_batch=64 is larger than the split's 50 samples"):
        epoch_batch(0, 64, 0, split=_indexed_split(50))


def test_in_memory_refuses_images_and_labels_of_different_lengths():
    with pytest.raises(ValueError, match="images has 3 rows but labels has 2"):
        InMemory(torch.zeros(3, 1, 2, 2, dtype=torch.uint8), torch.zeros(2, dtype=torch.int64))


def _image_split(n: int) -> Split:
    x, y = image_batch(0, n, 5)
    images = ((x.clamp(0, 1)) * 255).round().to(torch.uint8)
    return Split(dataset="synthetic", train=False, load=InMemory(images, y), pixel_max=255.0)


def test_evaluation_matches_a_direct_forward_pass_and_leaves_the_rng_alone():
    n = EVAL_BATCH + 137  # more than one evaluation batch, the last one short
    split = _image_split(n)
    factory = partial(MLP, hidden=16, layers=1)
    workload = Workload(model=factory, batch=image_batch)
    torch.manual_seed(11)
    trained = factory()
    params = {k: v.detach().clone() for k, v in trained.named_parameters()}
    rng = torch.get_rng_state()
    result = evaluate_state(workload, params, {}, split, device="cpu")
    assert torch.equal(torch.get_rng_state(), rng)  # building the evaluation copy drew no random numbers
    images, labels = split.load()
    with torch.no_grad():
        out = trained(images.float() / 255)
    assert result["samples"] == n
    assert result["accuracy"] == (out.argmax(1) == labels).sum().item() / n
    assert result["loss"] == pytest.approx(F.cross_entropy(out, labels).item(), rel=1e-5)


class _BatchNormNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm2d(1)
        self.fc = nn.Linear(28 * 28, 10)

    def forward(self, x):
        return self.fc(self.bn(x).flatten(1))


def test_evaluation_uses_the_trained_running_statistics_in_eval_mode():
    split = _image_split(64)
    torch.manual_seed(0)
    trained = _BatchNormNet()
    trained.bn.running_mean.fill_(0.4)
    trained.bn.running_var.fill_(0.09)
    trained.eval()
    workload = Workload(model=_BatchNormNet, batch=image_batch, stateful=True)
    result = evaluate_state(
        workload, dict(trained.named_parameters()), dict(trained.named_buffers()), split, device="cpu"
    )
    images, labels = split.load()
    with torch.no_grad():
        expected = (trained(images.float() / 255).argmax(1) == labels).float().mean().item()
    assert result["accuracy"] == pytest.approx(expected)


def test_a_state_that_does_not_fit_the_workload_names_the_parameters():
    workload = Workload(model=partial(MLP, hidden=16, layers=1), batch=image_batch)
    with pytest.raises(ValueError, match=r"missing \['net.1.bias'.*unexpected \['other'\]"):
        evaluate_state(
            workload, {"net.1.weight": torch.zeros(16, 784), "other": torch.zeros(1)}, {}, _image_split(8), device="cpu"
        )
