"""Convergence recipes: the packaged digits, the d2l models and hyper-parameters, Fashion-MNIST checks."""

from __future__ import annotations

import sys

import pytest
import torch
from fashion_synth import FILES, idx_bytes, write_fashion_dir

from dpbench.workloads.digits import digits_unavailable, load_digits_split
from dpbench.workloads.recipes import (
    RECIPES,
    d2l_lenet,
    d2l_resnet18,
    fashion_mnist_unavailable,
    get_recipe,
    recipe_unavailable,
)


@pytest.fixture(scope="module")
def fashion_dir(tmp_path_factory):
    return write_fashion_dir(tmp_path_factory.mktemp("fashion"), train=600, test=100)


@pytest.mark.slow  # importing scikit-learn takes seconds on a loaded machine
def test_the_digits_split_is_fixed_by_its_seed_and_covers_the_dataset():
    pytest.importorskip("sklearn", reason="the digits dataset ships with scikit-learn (the convergence extra)")
    from sklearn.datasets import load_digits

    train_x, train_y = load_digits_split(0, True)
    test_x, test_y = load_digits_split(0, False)
    assert (train_x.shape, test_x.shape) == ((1438, 1, 8, 8), (359, 1, 8, 8))
    assert train_x.dtype == torch.uint8 and int(train_x.max()) == 16
    full = torch.from_numpy(load_digits().target)
    counts = torch.bincount(train_y, minlength=10) + torch.bincount(test_y, minlength=10)
    assert torch.equal(counts, torch.bincount(full, minlength=10))  # every image in exactly one split
    other, _ = load_digits_split(1, False)
    assert not torch.equal(other, test_x)


def test_without_scikit_learn_the_reason_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)  # import now raises ImportError
    reason = digits_unavailable()
    assert "scikit-learn" in reason and "[convergence]" in reason
    assert recipe_unavailable(get_recipe("digits-mlp"), fashion_mnist_root=None) == reason


def test_d2l_models_keep_the_chapters_initialisation():
    torch.manual_seed(0)
    lenet = d2l_lenet()
    for name, p in lenet.named_parameters():
        if name.endswith("bias"):
            assert torch.count_nonzero(p) == 0, name
        else:
            assert abs(p.std().item() - 0.01) < 0.002, name
    resnet = d2l_resnet18()
    assert abs(resnet.stem[0].weight.std().item() - 0.01) < 0.002
    assert abs(resnet.head[2].weight.std().item() - 0.01) < 0.002
    assert torch.equal(resnet.stem[1].weight, torch.ones(64))  # BatchNorm keeps torch's init


def test_recipes_carry_d2ls_hyper_parameters():
    lenet, resnet, digits = get_recipe("d2l-lenet"), get_recipe("d2l-resnet18"), get_recipe("digits-mlp")
    assert (lenet.batch_and_lr(1), lenet.batch_and_lr(2), lenet.epochs) == ((256, 0.2), (256, 0.2), 10)
    assert (resnet.batch_and_lr(1), resnet.batch_and_lr(2), resnet.epochs) == ((256, 0.1), (512, 0.2), 10)
    assert lenet.runs() == [
        ("single", 1),
        ("manual", 1),
        ("manual", 2),
        ("dp", 1),
        ("dp", 2),
        ("torch-dp", 1),
        ("torch-dp", 2),
        ("ddp", 1),
        ("ddp", 2),
    ]
    assert digits.runs() == [("single", 1)] + [
        (s, 2) for s in ("dp", "torch-dp", "ddp", "manual", "allreduce", "fsdp", "zero")
    ]
    assert resnet.stateful and resnet.parity_tolerance is None
    with pytest.raises(ValueError, match="no batch and lr for world size 4 \\(it has: 1, 2\\)"):
        lenet.batch_and_lr(4)
    with pytest.raises(ValueError, match="Available names: digits-mlp, d2l-lenet, d2l-resnet18"):
        get_recipe("lenet")
    assert set(RECIPES) == {"digits-mlp", "d2l-lenet", "d2l-resnet18"}


def test_a_fashion_mnist_directory_builds_the_d2l_workloads(fashion_dir):
    assert fashion_mnist_unavailable(str(fashion_dir)) is None
    workload, test = get_recipe("d2l-lenet").build(fashion_mnist_root=str(fashion_dir))
    assert workload.params == {
        "recipe": "d2l-lenet",
        "dataset": "fashion-mnist",
        "train_samples": 600,
        "test_samples": 100,
    }
    x, y = workload.batch(2, 256, 0)  # the third and last full batch of the 600 images
    assert x.shape == (256, 1, 28, 28) and x.dtype == torch.float32 and 0 <= float(x.min()) <= float(x.max()) <= 1
    assert workload.model()(x).shape == (256, 10) and y.dtype == torch.int64
    assert test.samples() == 100 and not test.train
    resnet, _ = get_recipe("d2l-resnet18").build(fashion_mnist_root=str(fashion_dir))
    assert resnet.stateful and resnet.name == "d2l-resnet18"


def test_an_unset_fashion_mnist_directory_says_how_to_set_it():
    reason = fashion_mnist_unavailable(None)
    assert "DPBENCH_FASHION_MNIST" in reason and "t10k-labels-idx1-ubyte" in reason and "\n" not in reason


def _broken(tmp_path, problem: str):
    root = write_fashion_dir(tmp_path / problem, train=40, test=20)
    if problem == "missing":
        (root / "t10k-images-idx3-ubyte").unlink()
    elif problem == "truncated":
        path = root / "train-images-idx3-ubyte"
        path.write_bytes(path.read_bytes()[:-100])
    elif problem == "mismatched":
        (root / "t10k-labels-idx1-ubyte").write_bytes(idx_bytes(torch.zeros(19, dtype=torch.uint8)))
    return root


@pytest.mark.parametrize(
    "problem, named",
    [
        ("missing", "t10k-images-idx3-ubyte"),
        ("truncated", "train-images-idx3-ubyte"),
        ("mismatched", "t10k-labels-idx1-ubyte has 19 labels but"),
    ],
)
def test_a_broken_fashion_mnist_file_is_named_in_one_line(tmp_path, problem, named):
    reason = fashion_mnist_unavailable(str(_broken(tmp_path, problem)))
    assert named in reason and "\n" not in reason and reason.startswith("DPBENCH_FASHION_MNIST=")


def test_the_synthetic_directory_has_the_four_standard_files(fashion_dir):
    assert sorted(p.name for p in fashion_dir.iterdir()) == sorted(FILES)
