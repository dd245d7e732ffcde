"""Scatter inputs to replicas and gather their outputs — autograd-aware on every device.

Both are composed of differentiable tensor ops (``narrow`` + ``to`` to scatter, ``to`` +
``cat``/``stack`` to gather), so gradients flow back through them on CPU as well as CUDA,
and gradcheck/double backward work without hand-written backward formulas. torch's
``Scatter``/``Gather`` Functions refuse CPU tensors.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from numbers import Number
from typing import Any

import torch

from ._devices import DeviceLike, parse_device, parse_devices

__all__ = ["scatter", "scatter_kwargs", "gather", "chunk_sizes_for", "GATHER_LAYOUTS"]

# "concat": cat along dim (0-dim tensors become a vector, one entry per replica);
# "stack": stack along dim (a new dimension); "skip": list of per-replica values;
# "mean"/"sum": reduce over replicas (e.g. one scalar loss instead of a vector).
GATHER_LAYOUTS = ("concat", "stack", "skip", "mean", "sum")


def _is_namedtuple(obj: Any) -> bool:
    return isinstance(obj, tuple) and hasattr(obj, "_asdict") and hasattr(obj, "_fields")


def _is_dataclass_instance(obj: Any) -> bool:
    return dataclasses.is_dataclass(obj) and not isinstance(obj, type)


def chunk_sizes_for(batch: int, num_chunks: int) -> list[int]:
    """The shard sizes ``torch.chunk`` produces: ceil-sized chunks, possibly fewer than asked."""
    if batch == 0:
        return [0] * num_chunks  # torch.chunk of an empty dim gives num_chunks empty chunks
    size = -(-batch // num_chunks)
    full, rest = divmod(batch, size)
    return [size] * full + ([rest] if rest else [])


def _check_dim(dim: int, ndim: int, shape: tuple[int, ...], what: str) -> int:
    if not -ndim <= dim < ndim:
        raise ValueError(f"dim: expected a dimension in [{-ndim}, {ndim}) for {what} of shape {shape}, got {dim}")
    return dim % ndim


def _scatter_tensor(t: torch.Tensor, devices: list[torch.device], dim: int, chunk_sizes: Sequence[int] | None):
    if t.dim() == 0:
        raise ValueError(
            "inputs: cannot scatter a 0-dim tensor; every tensor input needs the batch dimension "
            f"dim={dim} (pass scalars as Python numbers, which are copied to every replica)"
        )
    d = _check_dim(dim, t.dim(), tuple(t.shape), "an input tensor")
    batch = t.size(d)
    if chunk_sizes is None:
        sizes = chunk_sizes_for(batch, len(devices))
    else:
        sizes = list(chunk_sizes)
        if sum(sizes) != batch:
            raise ValueError(
                f"chunk_sizes: expected sizes summing to the batch size {batch} (input shape {tuple(t.shape)}, "
                f"dim {dim}), got {sizes} (sum {sum(sizes)})"
            )
    if len(sizes) == 1:
        # One shard is the whole tensor: hand it over as is (moved if needed), no view needed.
        return (t.to(devices[0], non_blocking=devices[0].type == "cuda"),)
    shards = []
    start = 0
    for size, device in zip(sizes, devices):
        # narrow is a single-output view, so a module may still modify its input in place.
        shard = t.narrow(d, start, size)
        # non_blocking only towards CUDA: a non-blocking copy into CPU memory could be read early.
        shards.append(shard.to(device, non_blocking=device.type == "cuda"))
        start += size
    return tuple(shards)


def scatter(inputs: Any, target_gpus: Sequence[DeviceLike], dim: int = 0, *, chunk_sizes: Sequence[int] | None = None):
    """Split tensors in ``inputs`` along ``dim`` into one shard per device (``torch.chunk`` sizes).

    Tuples, lists, dicts and namedtuples are split recursively and keep their types; other
    objects are passed by reference to every shard. Like torch, a tensor returns a tuple of
    shards and a container returns a list. ``chunk_sizes`` (one int per device, summing to
    the batch) chooses uneven shares instead of ``torch.chunk``'s.
    """
    devices = parse_devices(target_gpus, argument="target_gpus")
    if chunk_sizes is not None:
        _check_chunk_sizes(chunk_sizes, len(devices))

    def scatter_map(obj: Any):
        if isinstance(obj, torch.Tensor):
            return _scatter_tensor(obj, devices, dim, chunk_sizes)
        if _is_namedtuple(obj):
            return [type(obj)(*args) for args in zip(*map(scatter_map, obj))]
        if isinstance(obj, tuple) and obj:
            return list(zip(*map(scatter_map, obj)))
        if isinstance(obj, list) and obj:
            return [list(shard) for shard in zip(*map(scatter_map, obj))]
        if isinstance(obj, dict) and obj:
            return [type(obj)(pairs) for pairs in zip(*map(scatter_map, obj.items()))]
        return [obj for _ in devices]

    try:
        return scatter_map(inputs)
    finally:
        scatter_map = None  # type: ignore[assignment]  # break the closure's reference cycle


def _check_chunk_sizes(chunk_sizes: Sequence[int], num_devices: int) -> None:
    sizes = list(chunk_sizes)
    if len(sizes) != num_devices:
        raise ValueError(f"chunk_sizes: expected one size per device ({num_devices}), got {len(sizes)}: {sizes}")
    for i, size in enumerate(sizes):
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"chunk_sizes[{i}]: expected a positive int, got {size!r}")


def scatter_kwargs(
    inputs: tuple[Any, ...],
    kwargs: dict[str, Any] | None,
    target_gpus: Sequence[DeviceLike],
    dim: int = 0,
    *,
    chunk_sizes: Sequence[int] | None = None,
) -> tuple[tuple[Any, ...], tuple[dict[str, Any], ...]]:
    """Scatter positional and keyword inputs; the shorter side is padded with ``()`` / ``{}``."""
    scattered_inputs = scatter(inputs, target_gpus, dim, chunk_sizes=chunk_sizes) if inputs else []
    scattered_kwargs = scatter(kwargs, target_gpus, dim, chunk_sizes=chunk_sizes) if kwargs else []
    # torch compares against len(inputs) here, which can leave the two sides unequal; pad to
    # the longer side so every replica gets both an args tuple and a kwargs dict.
    if len(scattered_inputs) < len(scattered_kwargs):
        scattered_inputs.extend(() for _ in range(len(scattered_kwargs) - len(scattered_inputs)))
    elif len(scattered_kwargs) < len(scattered_inputs):
        scattered_kwargs.extend({} for _ in range(len(scattered_inputs) - len(scattered_kwargs)))
    return tuple(scattered_inputs), tuple(scattered_kwargs)


def _normalize_layout(layout: str | Mapping[str, str] | None) -> dict[str, str]:
    if layout is None:
        return {}
    if isinstance(layout, str):
        layout = {"": layout}
    if not isinstance(layout, Mapping):
        raise TypeError(
            f"gather_layout: expected None, a layout name or a dict of 'key.path' -> layout, got "
            f"{type(layout).__name__}"
        )
    for key, value in layout.items():
        if not isinstance(key, str):
            raise TypeError(f"gather_layout: keys must be 'a.b'-style strings, got {key!r}")
        if value not in GATHER_LAYOUTS:
            raise ValueError(f"gather_layout[{key!r}]: expected one of {', '.join(GATHER_LAYOUTS)}, got {value!r}")
    return dict(layout)


class _Gatherer:
    def __init__(self, target: torch.device, dim: int, layout: dict[str, str]):
        self.target, self.dim, self.layout = target, dim, layout
        self.used: set[str] = set()
        self.seen: list[str] = []

    def node(self, values: Sequence[Any], path: str, mode: str | None) -> Any:
        if self.layout:
            self.seen.append(path)
            if path in self.layout:
                mode = self.layout[path]
                self.used.add(path)
        if mode == "skip":
            return list(values)
        first = values[0]
        if isinstance(first, torch.Tensor):
            for i, v in enumerate(values):
                if not isinstance(v, torch.Tensor):
                    raise TypeError(
                        f"gather: output {path or '<root>'!s} is a Tensor in replica 0 but {type(v).__name__} "
                        f"in replica {i}"
                    )
            return self.tensors(values, path, mode or "concat")
        if first is None:
            return None
        if isinstance(first, dict):
            for i, d in enumerate(values):
                if len(d) != len(first):
                    raise ValueError(
                        f"All dicts must have the same number of keys (output {path or '<root>'}: replica 0 "
                        f"has {list(first)}, replica {i} has {list(d)})"
                    )
                if d.keys() != first.keys():
                    raise ValueError(
                        f"All dicts must have the same keys (output {path or '<root>'}: replica 0 has "
                        f"{list(first)}, replica {i} has {list(d)})"
                    )
            return type(first)((k, self.node([d[k] for d in values], _join(path, k), mode)) for k in first)
        if _is_namedtuple(first):
            self._check_lengths(values, path)
            return type(first)._make(
                self.node(list(col), _join(path, name), mode) for name, col in zip(first._fields, zip(*values))
            )
        if _is_dataclass_instance(first):
            changes = {
                f.name: self.node([getattr(v, f.name) for v in values], _join(path, f.name), mode)
                for f in dataclasses.fields(first)
                if f.init
            }
            return dataclasses.replace(first, **changes)
        if isinstance(first, (list, tuple)):
            self._check_lengths(values, path)
            return type(first)(self.node(list(col), _join(path, str(i)), mode) for i, col in enumerate(zip(*values)))
        if mode in ("mean", "sum"):
            if not all(isinstance(v, Number) for v in values):
                raise TypeError(
                    f"gather_layout[{path!r}]: {mode!r} needs tensors or numbers, got {type(first).__name__}"
                )
            total = sum(values)
            return total / len(values) if mode == "mean" else total
        # torch fails on str/number outputs; returning one value per replica keeps them usable.
        return list(values)

    def tensors(self, values: Sequence[torch.Tensor], path: str, mode: str) -> torch.Tensor:
        moved = [v.to(self.target) for v in values]
        if mode == "concat":
            if all(v.dim() == 0 for v in moved):
                return torch.stack(moved)  # scalars (e.g. a loss): a vector with one entry per replica
            first = moved[0]
            _check_dim(self.dim, first.dim(), tuple(first.shape), f"output {path or '<root>'}")
            return torch.cat(moved, self.dim)
        if mode == "stack":
            first = moved[0]
            _check_dim(self.dim, first.dim() + 1, tuple(first.shape), f"stacking output {path or '<root>'}")
            return torch.stack(moved, self.dim)
        stacked = torch.stack(moved)
        return stacked.mean(0) if mode == "mean" else stacked.sum(0)

    def _check_lengths(self, values: Sequence[Any], path: str) -> None:
        for i, v in enumerate(values):
            if len(v) != len(values[0]):
                raise ValueError(
                    f"gather: output {path or '<root>'} has {len(values[0])} items in replica 0 but {len(v)} "
                    f"in replica {i}"
                )


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def gather(
    outputs: Sequence[Any],
    target_device: DeviceLike,
    dim: int = 0,
    *,
    layout: str | Mapping[str, str] | None = None,
) -> Any:
    """Combine per-replica ``outputs`` onto ``target_device`` (``-1`` or ``"cpu"`` for the CPU).

    Tensors are concatenated along ``dim`` (0-dim tensors become a vector); dicts,
    namedtuples, dataclasses, lists and tuples keep their structure; ``None`` stays ``None``;
    other leaves (str, numbers) come back as a list of per-replica values. ``layout`` picks
    another combination per key path (``"a.b"`` for nested keys, field names, list indices;
    ``""`` or a plain string for the whole output): one of :data:`GATHER_LAYOUTS`. A layout
    applies to everything below its path unless a deeper path overrides it.
    """
    target = parse_device(target_device, argument="target_device", allow_minus_one=True)
    outputs = list(outputs)
    if not outputs:
        raise ValueError("outputs: expected one output per replica, got an empty sequence")
    layout_map = _normalize_layout(layout)
    gatherer = _Gatherer(target, dim, layout_map)
    result = gatherer.node(outputs, "", None)
    unused = set(layout_map) - gatherer.used
    if unused:
        paths = ", ".join(repr(p) for p in gatherer.seen if p) or "none"
        raise ValueError(
            f"gather_layout: key(s) {sorted(unused)} matched nothing in the output; its key paths are: {paths}"
        )
    return result
