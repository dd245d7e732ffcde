"""The 8×8 handwritten digits that scikit-learn ships inside its wheel (1,797 images, 10 classes).

A real dataset that runs anywhere — CI, a laptop, a GPU box without Fashion-MNIST — with nothing
downloaded: ``sklearn.datasets.load_digits`` reads a file of the installed package. scikit-learn
is an optional dependency (the ``convergence`` extra; the ``test`` extra includes it):
:func:`digits_unavailable` says why the dataset cannot be used, for a skip reason.

The train/test split is fixed by ``split_seed`` alone (not the training seed), stratified by
nothing: a seeded permutation, the first :data:`TEST_FRACTION` of it the test split. Pixels are
the dataset's integers 0–16, kept as ``uint8`` ``[N, 1, 8, 8]``.
"""

from __future__ import annotations

from functools import lru_cache

import torch
from torch import nn

from dpbench.workloads._checks import as_int
from dpbench.workloads.data import step_generator
from dpbench.workloads.mlp import MLP
from dpbench.workloads.splits import InMemory, Split

__all__ = ["DIGITS_SHAPE", "TEST_FRACTION", "digits_unavailable", "load_digits_split", "digits_split", "digits_mlp"]

DIGITS_SHAPE = (1, 8, 8)
TEST_FRACTION = 0.2
PIXEL_MAX = 16.0
_STREAM_SPLIT = 8


def digits_unavailable() -> str | None:
    """None when scikit-learn's digits can be loaded here, else the reason (a skip reason)."""
    try:
        import sklearn.datasets  # noqa: F401
    except ImportError as exc:
        return (
            f"the digits dataset needs scikit-learn ({exc}); install dpbench's extra: pip install -e '.[convergence]'"
        )
    return None


@lru_cache(maxsize=2)
def _all_digits() -> tuple[torch.Tensor, torch.Tensor]:
    reason = digits_unavailable()
    if reason:
        raise ImportError(reason)
    from sklearn.datasets import load_digits  # reads the copy inside the installed wheel

    bunch = load_digits()
    images = torch.from_numpy(bunch.images).to(torch.uint8).reshape(-1, *DIGITS_SHAPE)
    labels = torch.from_numpy(bunch.target).to(torch.int64)
    return images, labels


@lru_cache(maxsize=4)
def load_digits_split(split_seed: int = 0, train: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """``(uint8 images [N, 1, 8, 8], int64 labels [N])`` of the train (1,438) or test (359) split."""
    split_seed = as_int("split_seed", split_seed)
    if not isinstance(train, bool):
        raise TypeError(f"train must be a bool, got {type(train).__name__} {train!r}")
    images, labels = _all_digits()
    order = torch.randperm(labels.shape[0], generator=step_generator(split_seed, 0, _STREAM_SPLIT))
    cut = int(round(TEST_FRACTION * labels.shape[0]))
    index = order[cut:] if train else order[:cut]
    return images[index].contiguous(), labels[index].contiguous()


def digits_split(*, train: bool, split_seed: int = 0) -> Split:
    """The split, read here (scikit-learn is imported once, in this process) and carried to the workers."""
    return Split(
        dataset="digits", train=train, load=InMemory(*load_digits_split(split_seed, train)), pixel_max=PIXEL_MAX
    )


def digits_mlp(*, hidden: int = 128) -> nn.Module:
    """64 → ``hidden`` → 10 with ReLU: reaches ≥ 0.95 test accuracy in a few seconds on two cores."""
    return MLP(in_features=DIGITS_SHAPE[1] * DIGITS_SHAPE[2], hidden=hidden, layers=1)
