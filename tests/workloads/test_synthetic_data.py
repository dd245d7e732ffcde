"""Synthetic batches: shapes, determinism per (step, seed), independence from the global RNG and from slicing."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dpbench.workloads import get_workload, list_workloads
from dpbench.workloads.data import (
    class_prototypes,
    image_batch,
    image_batch_factory,
    markov_successors,
    step_generator,
    token_batch,
)


def _tensors(batch):
    """Flatten ``(inputs, target)`` (inputs may be a tuple) into a list of tensors."""
    inputs, target = batch
    return [*(inputs if isinstance(inputs, tuple) else (inputs,)), target]


def _equal(a, b) -> bool:
    ta, tb = _tensors(a), _tensors(b)
    return len(ta) == len(tb) and all(x.dtype == y.dtype and torch.equal(x, y) for x, y in zip(ta, tb))


@pytest.mark.parametrize("name", list_workloads())
def test_same_step_and_seed_give_identical_batches_whatever_the_global_rng(name):
    batch = get_workload(name).batch
    torch.manual_seed(1)
    first = batch(3, 12, 7)
    torch.manual_seed(999)
    torch.rand(100)  # strategies consume the global RNG; the batch must not care
    assert _equal(first, batch(3, 12, 7))


@pytest.mark.parametrize("name", list_workloads())
def test_drawing_a_batch_leaves_the_global_rng_alone(name):
    state = torch.get_rng_state()
    get_workload(name).batch(0, 8, 0)
    assert torch.equal(torch.get_rng_state(), state)


@pytest.mark.parametrize("name", list_workloads())
def test_different_step_or_seed_gives_a_different_batch(name):
    batch = get_workload(name).batch
    reference = batch(0, 16, 0)
    assert not torch.equal(_tensors(batch(1, 16, 0))[0], _tensors(reference)[0])
    assert not torch.equal(_tensors(batch(0, 16, 1))[0], _tensors(reference)[0])


@pytest.mark.parametrize("name", list_workloads())
@pytest.mark.parametrize("world_size", [1, 2, 3, 5])
def test_global_batch_does_not_depend_on_how_it_is_sliced(name, world_size):
    batch = get_workload(name).batch
    whole = _tensors(batch(2, 10, 0))
    reference = [t.clone() for t in whole]
    # Slice every tensor the way strategies do (dim 0, possibly uneven): the slices put back
    # together are the global batch, row for row.
    pieces = [torch.tensor_split(t, world_size) for t in whole]
    assert all(torch.equal(torch.cat(column), t) for column, t in zip(pieces, reference))
    # A strategy that scribbles on its slice in place must not change what the next call returns
    # (no cached storage handed out).
    for column in pieces:
        for piece in column:
            piece.add_(1)
    assert all(torch.equal(a, b) for a, b in zip(_tensors(batch(2, 10, 0)), reference))


def test_image_batch_shapes_dtypes_and_labels():
    x, y = image_batch(0, 64, 0)
    assert x.shape == (64, 1, 28, 28) and x.dtype == torch.float32
    assert y.shape == (64,) and y.dtype == torch.int64
    assert int(y.min()) >= 0 and int(y.max()) <= 9
    assert torch.isfinite(x).all()


def test_images_carry_their_class_prototype():
    # Learnable structure: the mean image of each class is closest to that class's prototype.
    x, y = image_batch(0, 2000, 5)
    protos = class_prototypes(5).flatten(1)
    means = torch.stack([x[y == c].mean(0).flatten() for c in range(10)])
    nearest = torch.cdist(means, protos).argmin(dim=1)
    assert torch.equal(nearest, torch.arange(10))


def test_token_batch_target_is_next_token_of_the_chain():
    tokens, target = token_batch(4, 8, 3, vocab=64, context=16, branching=3)
    assert tokens.shape == target.shape == (8, 16) and tokens.dtype == target.dtype == torch.int64
    assert torch.equal(tokens[:, 1:], target[:, :-1])
    successors = markov_successors(3, vocab=64, branching=3)
    # every transition tokens[t] -> target[t] is one of the chain's listed successors
    allowed = (successors[tokens] == target.unsqueeze(-1)).any(dim=-1)
    assert allowed.all()


@settings(max_examples=25, deadline=None, database=None)
@given(step=st.integers(0, 10**9), seed=st.integers(-(2**63), 2**63 - 1), size=st.integers(1, 9))
def test_any_step_and_seed_is_valid_and_deterministic(step, seed, size):
    a = image_batch(step, size, seed)
    assert a[0].shape == (size, 1, 28, 28) and _equal(a, image_batch(step, size, seed))
    b = token_batch(step, size, seed, vocab=32, context=4)
    assert b[0].shape == (size, 4) and _equal(b, token_batch(step, size, seed, vocab=32, context=4))
    assert int(b[0].max()) < 32


def test_step_generators_differ_across_seed_step_and_stream():
    draws = {
        key: torch.randint(0, 2**31, (4,), generator=step_generator(*key)).tolist()
        for key in [(0, 0, 0), (0, 1, 0), (1, 0, 0), (0, 0, 1)]
    }
    assert len({tuple(v) for v in draws.values()}) == len(draws)


@pytest.mark.parametrize(
    "args, kwargs, error, message",
    [
        ((-1, 4, 0), {}, ValueError, "step must be >= 0, got -1"),
        ((0, 0, 0), {}, ValueError, "global_batch must be >= 1, got 0"),
        ((0, 4.0, 0), {}, TypeError, "global_batch must be an int, got float 4.0"),
        ((0, 4, "0"), {}, TypeError, "seed must be an int, got str '0'"),
        ((True, 4, 0), {}, TypeError, "step must be an int, got bool True"),
        ((0, 4, 0), {"noise": -0.1}, ValueError, "noise must be >= 0, got -0.1"),
        ((0, 4, 0), {"num_classes": 0}, ValueError, "num_classes must be >= 1, got 0"),
    ],
)
def test_bad_image_batch_arguments_name_the_argument(args, kwargs, error, message):
    with pytest.raises(error, match=message):
        image_batch(*args, **kwargs)


def test_bad_token_and_factory_arguments_name_the_argument():
    with pytest.raises(ValueError, match="vocab must be >= 2, got 1"):
        token_batch(0, 2, 0, vocab=1)
    with pytest.raises(ValueError, match="context must be >= 1, got 0"):
        token_batch(0, 2, 0, context=0)
    with pytest.raises(ValueError, match="noise must be >= 0, got nan"):
        image_batch_factory(noise=float("nan"))
