"""Labelled image datasets as train and test splits: epoch-aligned training batches and the
test-set evaluation every strategy shares (the convergence suite's data side).

A :class:`Split` carries a picklable loader, not the pixels: each process that needs the split
(a training rank, the evaluating rank 0) reads it once, from the package or the local files
(cached by the loader). Pixels stay ``uint8`` until a batch is cut, so a 60,000-image split costs
47 MB per process, not 188.

:func:`epoch_batch` is the ``BatchFactory`` of a convergence run: step ``t`` of epoch
``e = t // S`` (``S = N // B`` steps per epoch) takes positions ``(t mod S)·B … +B`` of epoch
``e``'s permutation, seeded by ``(seed, e)``. Every epoch is one pass over a fresh shuffle in
full global batches; the last ``N mod B`` samples of each permutation are dropped (a different
few each epoch), because every strategy steps a fixed global batch — d2l's loader keeps a short
last batch instead. The same global batches for every strategy and world size.

:func:`evaluate_state` is the one evaluation: a fresh model built from the workload, loaded
with the trained parameters and buffers (gathered by the strategy), in ``eval()`` mode, fp32,
on one device. It is the same code whatever strategy trained the weights.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch

from dpbench.workloads._checks import positive_int
from dpbench.workloads.data import check_batch_args, step_generator

__all__ = ["Split", "InMemory", "epoch_batch", "steps_per_epoch", "evaluate_state", "EVAL_BATCH"]

_STREAM_EPOCH_ORDER = 7  # distinct from the synthetic data's streams (dpbench.workloads.data)
EVAL_BATCH = 1000  # test samples per forward pass: bounds the evaluating rank's memory


class InMemory:
    """A ``Split.load`` that carries its (small) tensors: for data read once in the parent.

    The packaged digits are 115 KB: shipping them to the workers costs less than importing
    scikit-learn again in every rank of every trial (seconds each on a loaded machine).
    """

    def __init__(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        if images.shape[0] != labels.shape[0]:
            raise ValueError(f"images has {images.shape[0]} rows but labels has {labels.shape[0]}")
        self.images, self.labels = images, labels

    def __call__(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.images, self.labels

    def __repr__(self) -> str:
        return f"InMemory({self.labels.shape[0]} samples)"


@dataclass(kw_only=True, frozen=True)
class Split:
    """One split of a labelled image dataset: ``load()`` → ``(uint8 images [N, C, H, W], int64 labels [N])``.

    ``pixel_max`` maps pixels to ``[0, 1]`` (255 for Fashion-MNIST, 16 for the 8×8 digits).
    ``load`` must be picklable (a module-level function or a ``functools.partial`` of one) and
    cheap to call twice (cache inside it).
    """

    dataset: str
    train: bool
    load: Callable[[], tuple[torch.Tensor, torch.Tensor]]
    pixel_max: float

    @property
    def name(self) -> str:
        return f"{self.dataset}-{'train' if self.train else 'test'}"

    def samples(self) -> int:
        return int(self.load()[1].shape[0])

    def inputs(self, images: torch.Tensor) -> torch.Tensor:
        """Pixels as the model sees them: float32 in ``[0, 1]``."""
        # Not in place: a float split's slice is a view of the loader's cached tensor.
        return images.to(torch.float32) / self.pixel_max


def steps_per_epoch(samples: int, global_batch: int) -> int:
    """Full global batches in one pass over ``samples`` (the remainder is dropped)."""
    samples, global_batch = positive_int("samples", samples), positive_int("global_batch", global_batch)
    if global_batch > samples:
        raise ValueError(
            f"global_batch={global_batch} is larger than the split's {samples} samples: "
            "an epoch would have no full batch"
        )
    return samples // global_batch


@lru_cache(maxsize=4)
def _epoch_order(seed: int, epoch: int, samples: int) -> torch.Tensor:
    # Cached: every step of an epoch needs the same permutation (one randperm per epoch, not per step).
    return torch.randperm(samples, generator=step_generator(seed, epoch, _STREAM_EPOCH_ORDER))


def epoch_batch(step: int, global_batch: int, seed: int, *, split: Split) -> tuple[torch.Tensor, torch.Tensor]:
    """Global batch of ``step``: ``(x float32 [B, C, H, W] in [0, 1], y int64 [B])`` (see the module doc)."""
    step, global_batch, seed = check_batch_args(step, global_batch, seed)
    images, labels = split.load()
    samples = int(labels.shape[0])
    per_epoch = steps_per_epoch(samples, global_batch)
    epoch, position = divmod(step, per_epoch)
    index = _epoch_order(seed, epoch, samples)[position * global_batch : (position + 1) * global_batch]
    return split.inputs(images[index]), labels[index]


def _fresh_model(workload: Any) -> torch.nn.Module:
    # The evaluation copy must not move the training RNG (dropout draws from it after setup).
    with torch.random.fork_rng(devices=[]):
        return workload.model()


def _load_trained(model: torch.nn.Module, params: dict[str, torch.Tensor], buffers: dict[str, torch.Tensor]) -> None:
    own_params, own_buffers = dict(model.named_parameters()), dict(model.named_buffers())
    missing = sorted((set(own_params) - set(params)) | (set(own_buffers) - set(buffers)))
    extra = sorted(set(params) - set(own_params))
    if missing or extra:
        raise ValueError(
            f"the trained state does not fit a fresh model of the workload: missing {missing}, unexpected {extra}"
        )
    with torch.no_grad():
        for name, tensor in {**params, **{k: v for k, v in buffers.items() if k in own_buffers}}.items():
            target = own_params.get(name, own_buffers.get(name))
            target.copy_(tensor.to(target.device, target.dtype))


def evaluate_state(
    workload: Any,
    params: dict[str, torch.Tensor],
    buffers: dict[str, torch.Tensor],
    split: Split,
    *,
    device: str,
    cache: dict[str, Any] | None = None,
    heartbeat: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Test accuracy and mean loss of the trained state on ``split`` (untimed by the training clock).

    ``cache`` (a worker's state dict) keeps the evaluation model between epochs; ``heartbeat``
    is called after every batch (a worker pool's liveness signal: evaluating a big test split on a
    CPU may take longer than the pool's silence timeout).
    Returns ``{"accuracy", "loss", "samples", "eval_s", "device"}``.
    """
    started = time.perf_counter()
    cache = {} if cache is None else cache
    model = cache.get("eval_model")
    if model is None:
        model = _fresh_model(workload).to(device)
        cache["eval_model"] = model
    _load_trained(model, params, buffers)
    model.eval()  # BatchNorm uses its running statistics, dropout is off
    images, labels = split.load()
    correct, loss_sum = 0, 0.0
    with torch.no_grad():
        for start in range(0, labels.shape[0], EVAL_BATCH):
            x = split.inputs(images[start : start + EVAL_BATCH]).to(device)
            y = labels[start : start + EVAL_BATCH].to(device)
            output = model(x)
            loss_sum += float(workload.loss(output, y)) * y.shape[0]  # the loss is a batch mean
            correct += int((output.argmax(dim=1) == y).sum())
            if heartbeat is not None:
                heartbeat()
    samples = int(labels.shape[0])
    return {
        "accuracy": correct / samples,
        "loss": loss_sum / samples,
        "samples": samples,
        "eval_s": time.perf_counter() - started,
        "device": str(device),
    }
