"""Synthetic, seeded training data: the same global batch for every strategy and world size.

Every batch function has the ``BatchFactory`` signature ``batch(step, global_batch, seed)``
and returns the *global* ``(inputs, target)`` of that step. Randomness comes only from a
private ``torch.Generator`` seeded from ``(seed, step)``: never from the global RNG, which
strategies reseed and consume for weight initialisation, so drawing a batch cannot shift
anyone's initial weights and the batch does not depend on what ran before it.

The data is learnable on purpose (loss must go down in a few dozen SGD steps):

* images: each class has a fixed, smooth prototype derived from ``seed`` alone; a sample is
  its class prototype plus a random brightness change and pixel noise (Fashion-MNIST
  shaped: float32 ``[B, 1, 28, 28]``, int64 labels in ``0..9``);
* tokens: a seeded Markov chain whose next token is one of a few fixed successors of the
  current token, with successors drawn from a skewed (Zipf-like) distribution over the
  vocabulary, so a model first learns token frequencies and then the transitions.
"""

from __future__ import annotations

from functools import lru_cache, partial
from typing import Any

import torch
import torch.nn.functional as F

from dpbench.workloads._checks import as_int as _as_int
from dpbench.workloads._checks import positive_int

__all__ = [
    "IMAGE_SHAPE",
    "NUM_CLASSES",
    "step_generator",
    "class_prototypes",
    "image_batch",
    "markov_successors",
    "token_batch",
    "dict_image_batch",
    "image_batch_factory",
    "check_batch_args",
]

IMAGE_SHAPE = (1, 28, 28)
NUM_CLASSES = 10

_MASK64 = (1 << 64) - 1
# Distinct streams so the image prototypes, the per-step samples and the token chain of one
# seed never share random numbers.
_STREAM_PROTOTYPES = 1
_STREAM_IMAGES = 2
_STREAM_MARKOV_TABLE = 3
_STREAM_TOKENS = 4


def check_batch_args(step: Any, global_batch: Any, seed: Any) -> tuple[int, int, int]:
    """Validate the ``BatchFactory`` arguments; errors name the argument and what was found."""
    step, global_batch, seed = (
        _as_int("step", step),
        _as_int("global_batch", global_batch),
        _as_int("seed", seed),
    )
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    if global_batch < 1:
        raise ValueError(f"global_batch must be >= 1, got {global_batch}")
    return step, global_batch, seed


def _splitmix64(x: int) -> int:
    # A standard 64-bit mixer: nearby (seed, step) pairs give unrelated generator seeds.
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def step_generator(seed: int, step: int = 0, stream: int = 0) -> torch.Generator:
    """A fresh CPU ``torch.Generator`` determined by ``(seed, step, stream)`` alone."""
    mixed = _splitmix64((seed & _MASK64) ^ _splitmix64(step & _MASK64) ^ _splitmix64(stream + (1 << 40)))
    # manual_seed takes a non-negative int below 2**64; keep 63 bits to stay clear of sign issues.
    return torch.Generator().manual_seed(mixed & ((1 << 63) - 1))


@lru_cache(maxsize=32)
def _prototypes_cached(seed: int, num_classes: int) -> torch.Tensor:
    gen = step_generator(seed, 0, _STREAM_PROTOTYPES)
    # Smooth blobs: random 7x7 patterns upsampled to 28x28, so convolutions and linear layers
    # both find the class structure (pixel-wise white noise would favour the MLP).
    coarse = torch.randn(num_classes, 1, 7, 7, generator=gen)
    protos = F.interpolate(coarse, size=IMAGE_SHAPE[1:], mode="bilinear", align_corners=False)
    # Map to [0, 1] like Fashion-MNIST pixels after ToTensor().
    # A steep sigmoid gives high-contrast shapes (most pixels near 0 or 1), which SGD separates quickly.
    protos = torch.sigmoid(4.0 * protos)
    return protos


def class_prototypes(seed: int, num_classes: int = NUM_CLASSES) -> torch.Tensor:
    """The fixed per-class images ``[num_classes, 1, 28, 28]`` that ``image_batch`` samples around."""
    return _prototypes_cached(_as_int("seed", seed), positive_int("num_classes", num_classes)).clone()


def image_batch(
    step: int, global_batch: int, seed: int, *, noise: float = 0.5, num_classes: int = NUM_CLASSES
) -> tuple[torch.Tensor, torch.Tensor]:
    """Global batch of Fashion-MNIST-shaped images and labels for ``step``.

    Returns ``(x, y)`` with ``x`` float32 ``[global_batch, 1, 28, 28]`` and ``y`` int64
    ``[global_batch]`` in ``0..num_classes-1``.
    """
    step, global_batch, seed = check_batch_args(step, global_batch, seed)
    noise = _check_noise(noise)
    protos = _prototypes_cached(seed, positive_int("num_classes", num_classes))
    gen = step_generator(seed, step, _STREAM_IMAGES)
    y = torch.randint(0, protos.shape[0], (global_batch,), generator=gen, dtype=torch.int64)
    brightness = 0.75 + 0.5 * torch.rand(global_batch, 1, 1, 1, generator=gen)
    pixel_noise = noise * torch.randn(global_batch, *IMAGE_SHAPE, generator=gen)
    x = protos[y] * brightness + pixel_noise
    return x.contiguous(), y


def dict_image_batch(
    step: int, global_batch: int, seed: int, *, noise: float = 0.5, num_classes: int = NUM_CLASSES
) -> tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``image_batch`` shaped for models whose forward takes ``(x, y)``: ``((x, y), y)``."""
    x, y = image_batch(step, global_batch, seed, noise=noise, num_classes=num_classes)
    # The target is its own tensor, so nothing done to the inputs in place can reach it.
    return (x, y), y.clone()


def _check_noise(noise: Any) -> float:
    if isinstance(noise, bool) or not isinstance(noise, (int, float)):
        raise TypeError(f"noise must be a number, got {type(noise).__name__} {noise!r}")
    if not noise >= 0:  # also rejects NaN
        raise ValueError(f"noise must be >= 0, got {noise}")
    return float(noise)


def image_batch_factory(*, noise: float = 0.5, dict_inputs: bool = False):
    """A picklable ``BatchFactory`` for synthetic images: ``image_batch`` (inputs ``x``) or, with
    ``dict_inputs=True``, ``dict_image_batch`` (inputs ``(x, y)``), with ``noise`` checked now."""
    return partial(dict_image_batch if dict_inputs else image_batch, noise=_check_noise(noise))


@lru_cache(maxsize=32)
def _markov_cached(seed: int, vocab: int, branching: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = step_generator(seed, 0, _STREAM_MARKOV_TABLE)
    # Zipf-like popularity: successors are mostly popular tokens, so the unigram distribution is
    # skewed (quick early gains) while each token still has its own successor set (bigrams).
    popularity = 1.0 / torch.arange(1, vocab + 1, dtype=torch.float64)
    popularity = popularity[torch.randperm(vocab, generator=gen)]
    successors = torch.multinomial(popularity.expand(vocab, vocab), branching, replacement=True, generator=gen)
    return successors, popularity


def _check_markov_args(vocab: Any, branching: Any) -> tuple[int, int]:
    vocab, branching = _as_int("vocab", vocab), _as_int("branching", branching)
    if vocab < 2:
        raise ValueError(f"vocab must be >= 2, got {vocab}")
    if branching < 1:
        raise ValueError(f"branching must be >= 1, got {branching}")
    return vocab, branching


def markov_successors(seed: int, vocab: int = 512, branching: int = 4) -> torch.Tensor:
    """The chain's transition table ``[vocab, branching]``: row ``t`` lists the successors of ``t``."""
    vocab, branching = _check_markov_args(vocab, branching)
    table, _ = _markov_cached(_as_int("seed", seed), vocab, branching)
    return table.clone()


def token_batch(
    step: int,
    global_batch: int,
    seed: int,
    *,
    vocab: int = 512,
    context: int = 64,
    branching: int = 4,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Global batch of token sequences for next-token prediction.

    Returns ``(tokens, target)``, both int64 ``[global_batch, context]``, where ``target`` is
    ``tokens`` shifted left by one (the next token at every position).
    """
    step, global_batch, seed = check_batch_args(step, global_batch, seed)
    vocab, branching = _check_markov_args(vocab, branching)
    context = _as_int("context", context)
    if context < 1:
        raise ValueError(f"context must be >= 1, got {context}")
    successors, popularity = _markov_cached(seed, vocab, branching)
    gen = step_generator(seed, step, _STREAM_TOKENS)
    seq = torch.empty(global_batch, context + 1, dtype=torch.int64)
    seq[:, 0] = torch.multinomial(popularity, global_batch, replacement=True, generator=gen)
    choice = torch.randint(0, branching, (global_batch, context), generator=gen)
    for t in range(context):
        seq[:, t + 1] = successors[seq[:, t], choice[:, t]]
    return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()
