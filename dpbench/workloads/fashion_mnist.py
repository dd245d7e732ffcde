"""Real Fashion-MNIST from the standard IDX files in a local directory (never downloaded).

``read_idx(path)`` parses one IDX file (plain or gzip), ``load_fashion_mnist(root, train=...)``
returns ``(images uint8 [N, 28, 28], labels int64 [N])`` after checking the pair, and
``fashion_mnist_workload(root, model="lenet")`` trains a registered image model on it: the
batch of step ``t`` is samples ``t·B … (t+1)·B − 1`` of an endless stream of epochs, each epoch a
permutation seeded by ``(seed, epoch)`` — the same global batch for every strategy and world size.

The batch factory carries the directory, not the pixels, so pickling it for worker processes is
cheap; each process reads the files once (cached, keyed by path, size and modification time).
"""

from __future__ import annotations

import gzip
import os
import sys
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

import torch

from dpbench.workloads.base import Workload
from dpbench.workloads.data import IMAGE_SHAPE, NUM_CLASSES, check_batch_args, step_generator
from dpbench.workloads.dict_model import dict_model_workload
from dpbench.workloads.lenet import lenet_workload
from dpbench.workloads.mlp import mlp_workload
from dpbench.workloads.resnet import resnet18_workload

__all__ = [
    "read_idx",
    "find_fashion_mnist_files",
    "load_fashion_mnist",
    "fashion_mnist_batch",
    "fashion_mnist_workload",
]

# IDX type byte -> (torch dtype, bytes per item). Multi-byte items are big-endian in the file.
_IDX_TYPES = {
    0x08: (torch.uint8, 1),
    0x09: (torch.int8, 1),
    0x0B: (torch.int16, 2),
    0x0C: (torch.int32, 4),
    0x0D: (torch.float32, 4),
    0x0E: (torch.float64, 8),
}
_STREAM_EPOCHS = 11
# Image models whose inputs are images; dict_model takes (x, y) as its inputs.
_MODELS = {
    "lenet": lenet_workload,
    "mlp": mlp_workload,
    "resnet18": resnet18_workload,
    "dict_model": dict_model_workload,
}
_DICT_INPUT_MODELS = {"dict_model"}


def _read_bytes(path: Path) -> bytes:
    with open(path, "rb") as raw:
        compressed = raw.read(2) == b"\x1f\x8b"  # gzip magic, whatever the file is called
    if not compressed:
        return path.read_bytes()
    try:
        with gzip.open(path, "rb") as stream:
            return stream.read()
    except (OSError, EOFError) as exc:  # BadGzipFile is an OSError; truncation raises EOFError
        raise ValueError(f"{path}: not a readable gzip file ({type(exc).__name__}: {exc})") from exc


def read_idx(path: str | os.PathLike) -> torch.Tensor:
    """Parse one IDX file (plain or gzip-compressed) into a tensor of its dtype and dimensions."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"IDX file not found: {path}")
    data = _read_bytes(path)
    if len(data) < 4:
        raise ValueError(f"{path}: too short for an IDX header ({len(data)} bytes, expected at least 4)")
    if data[0] != 0 or data[1] != 0:
        raise ValueError(f"{path}: bad IDX magic number {data[:4].hex()} (expected it to start with 0000)")
    type_code, ndim = data[2], data[3]
    if type_code not in _IDX_TYPES:
        known = ", ".join(f"0x{code:02x}" for code in _IDX_TYPES)
        raise ValueError(f"{path}: unknown IDX data type 0x{type_code:02x} (expected one of {known})")
    if ndim < 1:
        raise ValueError(f"{path}: IDX header declares {ndim} dimensions (expected at least 1)")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise ValueError(f"{path}: truncated IDX header ({len(data)} bytes, expected {header} for {ndim} dimensions)")
    dims = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    dtype, itemsize = _IDX_TYPES[type_code]
    count = 1
    for d in dims:
        count *= d
    expected = header + count * itemsize
    if len(data) != expected:
        raise ValueError(
            f"{path}: IDX payload size mismatch: dimensions {dims} of {dtype} need {expected} bytes, file has "
            f"{len(data)}"
        )
    raw = torch.frombuffer(bytearray(data[header:]), dtype=torch.uint8) if count else torch.empty(0, dtype=torch.uint8)
    if itemsize > 1 and sys.byteorder == "little":
        raw = raw.view(-1, itemsize).flip(1).reshape(-1)  # big-endian file -> native order
    return raw.view(dtype).reshape(dims).clone()


def find_fashion_mnist_files(root: str | os.PathLike, *, train: bool = True) -> tuple[Path, Path]:
    """The ``(images, labels)`` IDX paths under ``root`` (or ``root/FashionMNIST/raw``), plain or ``.gz``."""
    root = Path(root)
    prefix = "train" if train else "t10k"
    names = (f"{prefix}-images-idx3-ubyte", f"{prefix}-labels-idx1-ubyte")
    found: list[Path] = []
    for name in names:
        candidates = [d / (name + ext) for d in (root, root / "FashionMNIST" / "raw") for ext in ("", ".gz")]
        hit = next((c for c in candidates if c.is_file()), None)
        if hit is None:
            raise FileNotFoundError(
                f"Fashion-MNIST file {name}[.gz] not found in {root} (nor in {root / 'FashionMNIST' / 'raw'}); "
                "dpbench never downloads: put the standard IDX files there"
            )
        found.append(hit)
    return found[0], found[1]


@lru_cache(maxsize=4)
def _load_cached(images_path: Path, labels_path: Path, _stamp: tuple) -> tuple[torch.Tensor, torch.Tensor]:
    images = read_idx(images_path)
    labels = read_idx(labels_path)
    if images.dtype != torch.uint8 or images.dim() != 3 or tuple(images.shape[1:]) != IMAGE_SHAPE[1:]:
        raise ValueError(
            f"{images_path}: expected uint8 images of shape [N, 28, 28], got {images.dtype} {list(images.shape)}"
        )
    if labels.dtype != torch.uint8 or labels.dim() != 1:
        raise ValueError(f"{labels_path}: expected uint8 labels of shape [N], got {labels.dtype} {list(labels.shape)}")
    if labels.shape[0] != images.shape[0]:
        raise ValueError(f"{labels_path} has {labels.shape[0]} labels but {images_path} has {images.shape[0]} images")
    if images.shape[0] == 0:
        raise ValueError(f"{images_path}: contains no images")
    if int(labels.max()) >= NUM_CLASSES:
        raise ValueError(f"{labels_path}: labels must be in 0..{NUM_CLASSES - 1}, found {int(labels.max())}")
    return images, labels.to(torch.int64)


def load_fashion_mnist(root: str | os.PathLike, *, train: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """``(images uint8 [N, 28, 28], labels int64 [N])`` of the train or test split under ``root``."""
    images_path, labels_path = find_fashion_mnist_files(root, train=train)
    # The stamp makes the cache notice files replaced on disk.
    stamp = tuple((s.st_size, s.st_mtime_ns) for s in (images_path.stat(), labels_path.stat()))
    return _load_cached(images_path.resolve(), labels_path.resolve(), stamp)


def fashion_mnist_batch(
    step: int, global_batch: int, seed: int, *, root: str, train: bool = True, dict_inputs: bool = False
) -> tuple[Any, torch.Tensor]:
    """Global batch of step ``step``: ``(x float32 [B, 1, 28, 28] in [0, 1], y int64 [B])``.

    With ``dict_inputs=True`` the inputs are ``(x, y)`` (for models whose forward takes both).
    """
    step, global_batch, seed = check_batch_args(step, global_batch, seed)
    images, labels = load_fashion_mnist(root, train=train)
    n = labels.shape[0]
    positions = torch.arange(global_batch, dtype=torch.int64) + step * global_batch
    epochs, offsets = positions // n, positions % n
    index = torch.empty(global_batch, dtype=torch.int64)
    for epoch in torch.unique(epochs).tolist():
        order = torch.randperm(n, generator=step_generator(seed, epoch, _STREAM_EPOCHS))
        in_epoch = epochs == epoch
        index[in_epoch] = order[offsets[in_epoch]]
    x = images[index].unsqueeze(1).to(torch.float32).div_(255.0)
    y = labels[index]
    return ((x, y) if dict_inputs else x), y


def fashion_mnist_workload(root: str | os.PathLike, model: str = "lenet", train: bool = True) -> Workload:
    """A ``Workload`` training the registered image model ``model`` on the IDX files under ``root``.

    ``model`` is one of ``lenet``, ``mlp``, ``resnet18``, ``dict_model`` (default sizes). The files
    are read and checked now, so a missing or corrupt file is an error here, not in a worker.
    """
    if model not in _MODELS:
        raise ValueError(
            f"model must name an image workload for Fashion-MNIST, got {model!r}. "
            f"Available names: {', '.join(sorted(_MODELS))}"
        )
    if not isinstance(train, bool):
        raise TypeError(f"train must be a bool, got {type(train).__name__} {train!r}")
    root = Path(root).resolve()
    images, _ = load_fashion_mnist(root, train=train)
    base = _MODELS[model]()
    split = "train" if train else "test"
    return Workload(
        model=base.model,
        batch=partial(fashion_mnist_batch, root=str(root), train=train, dict_inputs=model in _DICT_INPUT_MODELS),
        loss=base.loss,
        # The test split is other data: its own name. The directory is where, not what: not in params.
        name=f"fashion_mnist_{model}" + ("" if train else "-test"),
        params={"model": model, "split": split},
        description=f"{base.name} on Fashion-MNIST {split} ({images.shape[0]} images from {root})",
        stateful=base.stateful,
        tags=base.tags + ("fashion-mnist",),
    )
