"""scatter / scatter_kwargs / gather on CPU devices, against torch.chunk / torch.cat references."""

from __future__ import annotations

from collections import OrderedDict, namedtuple
from dataclasses import dataclass

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dpbench.parallel import gather, scatter, scatter_kwargs
from dpbench.parallel.scatter_gather import chunk_sizes_for

CPU2 = ["cpu", "cpu"]
CPU3 = ["cpu", "cpu", "cpu"]
Point = namedtuple("Point", ["x", "y"])


@dataclass(frozen=True)
class Out:
    logits: torch.Tensor
    label: str


@settings(max_examples=40, deadline=None, database=None)
@given(batch=st.integers(0, 40), n=st.integers(1, 6))
def test_chunk_sizes_match_torch_chunk(batch, n):
    assert chunk_sizes_for(batch, n) == [c.size(0) for c in torch.chunk(torch.empty(batch), n)]


def test_scatter_tensor_gives_torch_chunk_shards_uneven():
    x = torch.arange(14.0).view(7, 2)
    shards = scatter(x, CPU3)
    assert isinstance(shards, tuple)
    expected = torch.chunk(x, 3)
    assert len(shards) == len(expected) == 3
    for s, e in zip(shards, expected):
        assert torch.equal(s, e)


def test_scatter_tiny_batch_gives_fewer_shards():
    shards = scatter(torch.ones(1, 3), CPU3)
    assert len(shards) == 1 and shards[0].shape == (1, 3)
    # torch.chunk(2, 3) → 2 shards of one row each
    assert [s.size(0) for s in scatter(torch.ones(2, 3), CPU3)] == [1, 1]


def test_scatter_along_dim_1():
    x = torch.arange(12.0).view(2, 6)
    shards = scatter(x, CPU2, dim=1)
    assert [s.shape for s in shards] == [(2, 3), (2, 3)]
    assert torch.equal(torch.cat(shards, 1), x)
    shards = scatter(x, CPU2, dim=-1)
    assert torch.equal(shards[1], x[:, 3:])


def test_scatter_nested_keeps_types_and_passes_objects_by_reference():
    marker = object()
    x = torch.arange(8.0).view(4, 2)
    data = {"t": (x, [x + 1, marker]), "p": Point(x * 2, "s"), "od": OrderedDict(a=x)}
    shards = scatter(data, CPU2)
    assert isinstance(shards, list) and len(shards) == 2
    for i, shard in enumerate(shards):
        rows = slice(2 * i, 2 * i + 2)
        assert type(shard) is dict
        assert isinstance(shard["t"], tuple) and isinstance(shard["t"][1], list)
        assert torch.equal(shard["t"][0], x[rows]) and torch.equal(shard["t"][1][0], x[rows] + 1)
        assert shard["t"][1][1] is marker
        assert type(shard["p"]) is Point and torch.equal(shard["p"].x, x[rows] * 2) and shard["p"].y == "s"
        assert type(shard["od"]) is OrderedDict


def test_scatter_shards_share_storage_on_same_device():
    # Like torch on the input's own GPU: no copy is made when the target is the input's device.
    x = torch.zeros(4, 2)
    shards = scatter(x, CPU2)
    assert shards[1].data_ptr() == x[2:].data_ptr()


def test_scatter_kwargs_pads_the_shorter_side():
    x = torch.ones(4, 2)
    args, kwargs = scatter_kwargs((x,), None, CPU2)
    assert len(args) == 2 and kwargs == ({}, {})
    args, kwargs = scatter_kwargs((), {"z": x}, CPU2)
    assert args == ((), ()) and torch.equal(kwargs[1]["z"], x[2:])
    # positional batch gives 2 shards, keyword batch 3: positional side is padded with ()
    args, kwargs = scatter_kwargs((torch.ones(2, 1),), {"z": torch.ones(3, 1)}, CPU3)
    assert len(args) == len(kwargs) == 3 and args[2] == ()


def test_scatter_chunk_sizes_uneven_shares():
    x = torch.arange(10.0)
    shards = scatter(x, CPU3, chunk_sizes=[2, 5, 3])
    assert [s.numel() for s in shards] == [2, 5, 3]
    assert torch.equal(torch.cat(shards), x)


@pytest.mark.parametrize(
    "call, match",
    [
        (
            lambda: scatter(torch.ones(10), CPU2, chunk_sizes=[3, 3]),
            r"chunk_sizes: expected sizes summing to the batch size 10.*sum 6",
        ),
        (lambda: scatter(torch.ones(10), CPU2, chunk_sizes=[10]), r"chunk_sizes: expected one size per device \(2\)"),
        (lambda: scatter(torch.ones(10), CPU2, chunk_sizes=[10, 0]), r"chunk_sizes\[1\]: expected a positive int"),
        (lambda: scatter(torch.ones(4, 2), CPU2, dim=2), r"dim: expected a dimension in \[-2, 2\).*got 2"),
        (lambda: scatter(torch.tensor(1.0), CPU2), r"inputs: cannot scatter a 0-dim tensor"),
        (lambda: scatter(torch.ones(4), []), r"target_gpus: expected at least one device, got an empty list"),
        (
            lambda: scatter(torch.ones(4), ["cpu", "gpu0"]),
            r"target_gpus\[1\]: expected an int CUDA index, 'cuda:N' or 'cpu', got 'gpu0'",
        ),
        (lambda: gather([torch.ones(2, 2)] * 2, "cpu", dim=3), r"dim: expected a dimension in \[-2, 2\).*got 3"),
        (lambda: gather([], "cpu"), r"outputs: expected one output per replica"),
        (lambda: gather([{"a": 1}, {"a": 1, "b": 2}], "cpu"), r"All dicts must have the same number of keys"),
        (lambda: gather([{"a": 1}, {"b": 1}], "cpu"), r"All dicts must have the same keys.*replica 1 has \['b'\]"),
        (
            lambda: gather([torch.ones(1)] * 2, "cpu", layout="median"),
            r"gather_layout\[''\]: expected one of concat, stack, skip, mean, sum",
        ),
        (
            lambda: gather([{"a": torch.ones(1)}] * 2, "cpu", layout={"b": "mean"}),
            r"gather_layout: key\(s\) \['b'\] matched nothing.*'a'",
        ),
    ],
)
def test_bad_input_is_a_clear_error(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error for a CUDA device on a machine without CUDA")
def test_cuda_device_without_cuda_is_a_clear_error():
    with pytest.raises(ValueError, match=r"target_gpus\[0\]: got 'cuda:0' but CUDA is not available"):
        scatter(torch.ones(4), ["cuda:0"])
    with pytest.raises(ValueError, match=r"target_gpus\[0\]: got 'cuda:1' but CUDA is not available"):
        scatter(torch.ones(4), [1])


def test_gather_concat_scalars_none_and_structures():
    a, b = torch.arange(4.0).view(2, 2), torch.arange(4.0, 10.0).view(3, 2)
    assert torch.equal(gather([a, b], "cpu"), torch.cat([a, b]))
    assert torch.equal(gather([a.T, b.T], -1, dim=1), torch.cat([a, b]).T)  # -1 means the CPU, as in torch
    assert torch.equal(gather([torch.tensor(1.0), torch.tensor(2.0)], "cpu"), torch.tensor([1.0, 2.0]))
    assert gather([None, None], "cpu") is None
    got = gather([Point(a, {"k": a}), Point(b, {"k": b})], "cpu")
    assert type(got) is Point and torch.equal(got.x, torch.cat([a, b])) and torch.equal(got.y["k"], torch.cat([a, b]))
    got = gather([Out(a, "r0"), Out(b, "r1")], "cpu")
    assert type(got) is Out and torch.equal(got.logits, torch.cat([a, b])) and got.label == ["r0", "r1"]
    got = gather([[a, 1, "x"], [b, 2, "y"]], "cpu")
    assert torch.equal(got[0], torch.cat([a, b])) and got[1:] == [[1, 2], ["x", "y"]]


def test_gather_layouts_including_nested_keys():
    outs = [
        {"loss": torch.tensor(1.0), "m": {"feat": torch.ones(2, 3), "n": torch.tensor(2.0)}, "ids": torch.zeros(2)},
        {"loss": torch.tensor(3.0), "m": {"feat": torch.zeros(2, 3), "n": torch.tensor(4.0)}, "ids": torch.ones(2)},
    ]
    got = gather(outs, "cpu", layout={"loss": "mean", "m.feat": "stack", "m.n": "sum", "ids": "skip"})
    assert torch.equal(got["loss"], torch.tensor(2.0))
    assert torch.equal(got["m"]["feat"], torch.stack([torch.ones(2, 3), torch.zeros(2, 3)]))
    assert torch.equal(got["m"]["n"], torch.tensor(6.0))
    assert isinstance(got["ids"], list) and got["ids"][1] is outs[1]["ids"]
    # a layout on an inner node applies to everything below it; a deeper key overrides it
    got = gather(outs, "cpu", layout={"m": "stack", "m.n": "mean"})
    assert got["m"]["feat"].shape == (2, 2, 3) and torch.equal(got["m"]["n"], torch.tensor(3.0))
    assert gather([2, 4], "cpu", layout="mean") == 3.0


def _structures(leaf):
    return st.recursive(
        leaf,
        lambda children: st.one_of(
            st.lists(children, min_size=1, max_size=3),
            st.lists(children, min_size=1, max_size=3).map(tuple),
            st.dictionaries(st.sampled_from("abc"), children, min_size=1, max_size=3),
            st.tuples(children, children).map(lambda t: Point(*t)),
        ),
        max_leaves=5,
    )


@settings(max_examples=40, deadline=None, database=None)
@given(data=st.data(), batch=st.integers(1, 9), n=st.integers(1, 4), dim=st.sampled_from([0, 1]))
def test_scatter_then_gather_round_trips(data, batch, n, dim):
    def leaf(width):
        shape = (batch, width) if dim == 0 else (width, batch)
        return torch.arange(batch * width, dtype=torch.float64).view(shape) + width

    structure = data.draw(_structures(st.integers(1, 3).map(leaf)))
    shards = scatter(structure, ["cpu"] * n, dim=dim)
    assert len(shards) == len(chunk_sizes_for(batch, n))
    back = gather(shards, "cpu", dim=dim)

    def same(a, b):
        assert type(a) is type(b)
        if isinstance(a, torch.Tensor):
            assert torch.equal(a, b)
        elif isinstance(a, dict):
            assert a.keys() == b.keys() and all(same(a[k], b[k]) is None for k in a)
        else:
            assert len(a) == len(b) and all(same(x, y) is None for x, y in zip(a, b))

    same(structure, back)


def test_gradcheck_through_scatter_and_gather():
    x = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, dtype=torch.float64)

    def pipeline(inp):
        shards = scatter(inp, CPU3)
        return gather([s * w * (i + 1) for i, s in enumerate(shards)], "cpu")

    assert torch.autograd.gradcheck(pipeline, (x,))
    assert torch.autograd.gradgradcheck(pipeline, (x,))

    def reduced(inp):
        shards = scatter(inp, CPU2, dim=1, chunk_sizes=[1, 2])
        outs = [{"s": (s**2).sum(), "t": s.sum(1)} for s in shards]
        g = gather(outs, "cpu", dim=0, layout={"s": "mean", "t": "stack"})
        return g["s"], g["t"]

    assert torch.autograd.gradcheck(reduced, (x,))
