"""Fashion-MNIST IDX reader and workload, on small IDX files the tests write themselves."""

from __future__ import annotations

import gzip
import pickle
import struct
from pathlib import Path

import pytest
import torch
from workload_helpers import call_model, sgd_losses

from dpbench.workloads import fashion_mnist_workload, load_fashion_mnist, read_idx
from dpbench.workloads.data import image_batch

# IDX type byte and struct format (big-endian) per dtype, written independently of the reader.
_FORMATS = {
    torch.uint8: (0x08, "B"),
    torch.int8: (0x09, "b"),
    torch.int16: (0x0B, "h"),
    torch.int32: (0x0C, "i"),
    torch.float32: (0x0D, "f"),
    torch.float64: (0x0E, "d"),
}


def idx_bytes(tensor: torch.Tensor) -> bytes:
    code, fmt = _FORMATS[tensor.dtype]
    header = bytes([0, 0, code, tensor.dim()]) + b"".join(struct.pack(">I", d) for d in tensor.shape)
    values = tensor.flatten().tolist()
    return header + struct.pack(f">{len(values)}{fmt}", *values)


def write_idx(path: Path, tensor: torch.Tensor, *, compress: bool = False) -> Path:
    data = idx_bytes(tensor)
    if compress:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


def write_split(root: Path, images: torch.Tensor, labels: torch.Tensor, *, train=True, compress=False):
    prefix = "train" if train else "t10k"
    write_idx(root / f"{prefix}-images-idx3-ubyte", images, compress=compress)
    write_idx(root / f"{prefix}-labels-idx1-ubyte", labels, compress=compress)


def random_split(n: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, 28, 28), generator=gen, dtype=torch.uint8), torch.randint(
        0, 10, (n,), generator=gen, dtype=torch.uint8
    )


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("dtype", list(_FORMATS))
def test_read_idx_round_trips_every_type(tmp_path, dtype, compress):
    gen = torch.Generator().manual_seed(1)
    values = (torch.randn(3, 4, 5, generator=gen) * 100).to(dtype)
    path = write_idx(tmp_path / "data-idx3", values, compress=compress)
    read = read_idx(path)
    assert read.dtype == dtype and torch.equal(read, values)


@pytest.mark.parametrize(
    "data, message",
    [
        (b"\x00\x00", "too short for an IDX header"),
        (b"\x01\x00\x08\x01\x00\x00\x00\x01\x07", "bad IDX magic number 01000801"),
        (b"\x00\x00\x07\x01\x00\x00\x00\x01\x07", "unknown IDX data type 0x07"),
        (b"\x00\x00\x08\x00", "declares 0 dimensions"),
        (b"\x00\x00\x08\x02\x00\x00\x00\x02", "truncated IDX header"),
        (b"\x00\x00\x08\x01\x00\x00\x00\x03\x01\x02", r"dimensions \[3\] of torch.uint8 need 11 bytes, file has 10"),
        (b"\x00\x00\x08\x01\x00\x00\x00\x01\x01\x02", "need 9 bytes, file has 10"),
    ],
)
def test_read_idx_rejects_corrupt_files_naming_them(tmp_path, data, message):
    path = tmp_path / "broken-idx1-ubyte"
    path.write_bytes(data)
    with pytest.raises(ValueError, match=message) as info:
        read_idx(path)
    assert str(path) in str(info.value)


def test_read_idx_rejects_truncated_gzip_and_missing_files(tmp_path):
    path = tmp_path / "labels-idx1-ubyte.gz"
    path.write_bytes(gzip.compress(idx_bytes(torch.arange(50, dtype=torch.uint8)))[:-10])
    with pytest.raises(ValueError, match="not a readable gzip file") as info:
        read_idx(path)
    assert str(path) in str(info.value)
    with pytest.raises(FileNotFoundError, match="IDX file not found: .*nothing-here"):
        read_idx(tmp_path / "nothing-here")


@pytest.mark.parametrize("compress", [False, True])
def test_load_fashion_mnist_reads_both_splits(tmp_path, compress):
    train_images, train_labels = random_split(30, seed=0)
    test_images, test_labels = random_split(12, seed=1)
    write_split(tmp_path, train_images, train_labels, train=True, compress=compress)
    write_split(tmp_path, test_images, test_labels, train=False, compress=compress)
    images, labels = load_fashion_mnist(tmp_path, train=True)
    assert torch.equal(images, train_images) and labels.dtype == torch.int64
    assert torch.equal(labels, train_labels.long())
    images, labels = load_fashion_mnist(tmp_path, train=False)
    assert torch.equal(images, test_images) and torch.equal(labels, test_labels.long())


def test_load_notices_replaced_files(tmp_path):
    write_split(tmp_path, *random_split(10, seed=0))
    first, _ = load_fashion_mnist(tmp_path)
    replacement = random_split(11, seed=5)
    write_split(tmp_path, *replacement)
    second, _ = load_fashion_mnist(tmp_path)
    assert torch.equal(second, replacement[0]) and not torch.equal(first[:10], second[:10])


@pytest.mark.parametrize(
    "images, labels, message",
    [
        (
            torch.zeros(5, 28, 27, dtype=torch.uint8),
            torch.zeros(5, dtype=torch.uint8),
            r"shape \[N, 28, 28\], got torch.uint8 \[5, 28, 27\]",
        ),
        (torch.zeros(5, 28, 28, dtype=torch.int16), torch.zeros(5, dtype=torch.uint8), "expected uint8 images"),
        (
            torch.zeros(5, 28, 28, dtype=torch.uint8),
            torch.zeros(4, dtype=torch.uint8),
            "has 4 labels but .* has 5 images",
        ),
        (
            torch.zeros(5, 28, 28, dtype=torch.uint8),
            torch.full((5,), 10, dtype=torch.uint8),
            r"labels must be in 0..9, found 10",
        ),
        (
            torch.zeros(5, 28, 28, dtype=torch.uint8),
            torch.zeros(5, 1, dtype=torch.uint8),
            r"expected uint8 labels of shape \[N\]",
        ),
    ],
)
def test_load_rejects_inconsistent_files(tmp_path, images, labels, message):
    write_split(tmp_path, images, labels)
    with pytest.raises(ValueError, match=message):
        load_fashion_mnist(tmp_path)


def test_missing_split_names_the_file_and_never_downloads(tmp_path):
    write_idx(tmp_path / "train-images-idx3-ubyte", torch.zeros(2, 28, 28, dtype=torch.uint8))
    with pytest.raises(FileNotFoundError, match=r"train-labels-idx1-ubyte\[.gz\] not found in .*never downloads"):
        fashion_mnist_workload(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"t10k-images-idx3-ubyte\[.gz\] not found"):
        fashion_mnist_workload(tmp_path, train=False)


def test_torchvision_raw_layout_is_found(tmp_path):
    raw = tmp_path / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    split = random_split(6)
    write_split(raw, *split, compress=True)
    assert torch.equal(load_fashion_mnist(tmp_path)[0], split[0])


def test_workload_batches_are_a_seeded_permutation_of_the_data(tmp_path):
    images, labels = random_split(50)
    write_split(tmp_path, images, labels, compress=True)
    workload = fashion_mnist_workload(tmp_path, model="lenet")
    assert workload.name == "fashion_mnist_lenet" and not workload.stateful
    flat = images.flatten(1).float() / 255

    def indices(step, batch, seed):
        x, y = workload.batch(step, batch, seed)
        assert x.shape == (batch, 1, 28, 28) and x.dtype == torch.float32 and y.dtype == torch.int64
        # each row is one stored image (pixels / 255) with its own label
        match = (x.flatten(1).unsqueeze(1) == flat.unsqueeze(0)).all(-1)
        assert (match.sum(1) == 1).all()
        idx = match.float().argmax(1)
        assert torch.equal(y, labels[idx].long())
        return idx

    # Steps 0..9 of batch 10 cover two epochs; each epoch visits every sample exactly once.
    order = torch.cat([indices(step, 10, 3) for step in range(10)])
    assert sorted(order[:50].tolist()) == list(range(50)) == sorted(order[50:].tolist())
    assert not torch.equal(order[:50], order[50:])  # a fresh permutation per epoch
    assert not torch.equal(order[:50], torch.arange(50))
    # The global sample stream is the same whatever the batch size (so also whatever world size).
    assert torch.equal(torch.cat([indices(step, 25, 3) for step in range(4)]), order)
    # A batch larger than the data set wraps over epochs the same way.
    assert torch.equal(indices(0, 120, 3)[:100], order)
    assert torch.equal(indices(4, 10, 3), order[40:50])
    assert not torch.equal(indices(0, 50, 4), order[:50])  # another seed, another order


def test_workload_pickles_small_and_supports_dict_model(tmp_path):
    write_split(tmp_path, *random_split(20))
    workload = fashion_mnist_workload(tmp_path, model="dict_model")
    # The batch factory carries the directory, not the pixels.
    assert len(pickle.dumps(workload.batch)) < 1000
    clone = pickle.loads(pickle.dumps(workload))
    (x, y), target = clone.batch(1, 8, 0)
    assert torch.equal(y, target)
    torch.manual_seed(0)
    output = call_model(clone.model(), (x, y))
    assert clone.loss(output, target).dim() == 0


def test_workload_rejects_models_that_do_not_take_images(tmp_path):
    write_split(tmp_path, *random_split(4))
    with pytest.raises(ValueError, match="got 'transformer'. Available names: dict_model, lenet, mlp, resnet18"):
        fashion_mnist_workload(tmp_path, model="transformer")
    with pytest.raises(TypeError, match="train must be a bool, got str"):
        fashion_mnist_workload(tmp_path, train="yes")


@pytest.mark.slow
def test_loss_goes_down_on_learnable_idx_files(tmp_path):
    # Quantise the synthetic class-prototype images to uint8 and store them as IDX: an
    # end-to-end check that reader → batches → model → loss trains.
    x, y = image_batch(0, 400, 0, noise=0.2)
    write_split(tmp_path, (x.clamp(0, 1) * 255).round().to(torch.uint8).squeeze(1), y.to(torch.uint8))
    losses = sgd_losses(fashion_mnist_workload(tmp_path, model="dict_model"), steps=20, batch=16)
    assert sum(losses[-5:]) / 5 < 0.95 * sum(losses[:5]) / 5
