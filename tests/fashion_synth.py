"""A synthetic Fashion-MNIST directory: the four standard IDX files, small and learnable.

Written here byte by byte (big-endian header, uint8 payload) independently of the reader, so the
convergence tests drive the real file path a GPU user takes. Each class is a fixed smooth
prototype (:func:`dpbench.workloads.data.class_prototypes`) with pixel noise, so a LeNet learns
it in a few steps. A plain module: imported by name (tests/ is on sys.path).
"""

from __future__ import annotations

import struct
from pathlib import Path

import torch

from dpbench.workloads.data import class_prototypes, step_generator

__all__ = ["FILES", "idx_bytes", "synthetic_images", "write_fashion_dir"]

FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def idx_bytes(tensor: torch.Tensor) -> bytes:
    """An IDX file of uint8 ``tensor``: magic 0x0000 08 <ndim>, then each dimension as a big-endian u32."""
    assert tensor.dtype == torch.uint8
    header = bytes([0, 0, 0x08, tensor.dim()]) + b"".join(struct.pack(">I", d) for d in tensor.shape)
    return header + bytes(tensor.flatten().tolist())


def synthetic_images(n: int, *, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = step_generator(seed, n, 99)
    labels = torch.randint(0, 10, (n,), generator=gen)
    protos = class_prototypes(1234)[:, 0]  # the same classes for both splits
    pixels = protos[labels] + 0.3 * torch.randn(n, 28, 28, generator=gen)
    return (pixels.clamp(0, 1) * 255).round().to(torch.uint8), labels.to(torch.uint8)


def write_fashion_dir(root: Path, *, train: int = 1024, test: int = 500) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for prefix, n, seed in (("train", train, 1), ("t10k", test, 2)):
        images, labels = synthetic_images(n, seed=seed)
        (root / f"{prefix}-images-idx3-ubyte").write_bytes(idx_bytes(images))
        (root / f"{prefix}-labels-idx1-ubyte").write_bytes(idx_bytes(labels))
    return root
