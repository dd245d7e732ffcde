"""Checks behind ``Workload``: each names the part and says what it must be, before any worker starts."""

from __future__ import annotations

import functools
import inspect
import io
import math
import pickle
from typing import Any

from torch import nn

__all__ = ["check_parts", "json_params", "main_references", "function_name", "tensor_rows"]

# What each part is called with, and how to say what it must be.
_PARTS = {
    "model": (
        0,
        "a zero-argument callable that returns a new nn.Module (a function, an nn.Module "
        "class or a functools.partial of one), called once per replica after seeding",
    ),
    "batch": (3, "a function batch(step, global_batch, seed) -> (inputs, target)"),
    "loss": (2, "a function loss(output, target) -> scalar tensor"),
}


def check_parts(workload: Any) -> None:
    """Raise ``TypeError`` naming the first of model, batch and loss that cannot be called as documented."""
    for attr, (arity, needed) in _PARTS.items():
        problem = _call_problem(getattr(workload, attr), arity, module_allowed=attr == "loss")
        if problem:
            raise TypeError(f"Workload.{attr} must be {needed}, {problem}")


def _call_problem(value: Any, arity: int, *, module_allowed: bool) -> str | None:
    if isinstance(value, nn.Module) and not module_allowed:
        # A module is callable, but it is one set of weights: every replica needs its own,
        # built from the same seed, so the workload holds the recipe, not the result.
        return (
            f"got an nn.Module instance ({type(value).__name__}); pass the function that builds it, "
            f"e.g. functools.partial({type(value).__name__}, ...) or a def returning it"
        )
    if not callable(value):
        return f"got {type(value).__name__}"
    try:
        signature = inspect.signature(value)
    except (TypeError, ValueError):  # some builtins have no signature: nothing to check
        return None
    try:
        signature.bind(*([None] * arity))
    except TypeError:
        name = function_name(value)
        missing = [
            p.name
            for p in signature.parameters.values()
            if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        ]
        if arity == 0 and missing:
            return f"but {name} needs argument {missing[0]!r} (bind it with functools.partial)"
        return f"but {name} cannot take {arity} positional arguments: {name}{signature}"
    return None


def function_name(value: Any) -> str:
    """The readable name of a callable: a partial's function, a function's or class's qualified name."""
    while isinstance(value, functools.partial):
        value = value.func
    return getattr(value, "__qualname__", None) or type(value).__name__


def json_params(params: Any) -> dict[str, Any]:
    """``params`` as JSON data (tuples become lists, a copy); ``TypeError`` naming what is not."""

    def fail(found: str) -> TypeError:
        return TypeError(
            f"Workload.params must be a dict of JSON values (str keys; numbers, str, bool, None, "
            f"lists and dicts of them), {found}"
        )

    if not isinstance(params, dict):
        raise fail(f"got {type(params).__name__}")

    def convert(value: Any, where: str) -> Any:
        if value is None or isinstance(value, (bool, int, str)):
            return value
        if isinstance(value, float):
            if not math.isfinite(value):
                raise fail(f"but {where} is {value!r}")
            return value
        if isinstance(value, (list, tuple)):
            return [convert(item, f"{where}[{i}]") for i, item in enumerate(value)]
        if isinstance(value, dict):
            for key in value:
                if not isinstance(key, str):
                    raise fail(f"but key {key!r} is {type(key).__name__}")
            return {key: convert(item, f"{where}[{key!r}]") for key, item in value.items()}
        raise fail(f"but {where} is {type(value).__name__}")

    return convert(params, "params")


class _MainReferences(pickle.Pickler):
    """Pickles into nothing, noting every function or class of ``__main__`` it refers to by name."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO(), protocol=pickle.HIGHEST_PROTOCOL)
        self.found: list[Any] = []

    def reducer_override(self, obj: Any) -> Any:
        if (inspect.isfunction(obj) or inspect.isclass(obj)) and getattr(obj, "__module__", None) == "__main__":
            self.found.append(obj)
        return NotImplemented  # pickle it as usual


def main_references(value: Any) -> list[Any]:
    """The functions and classes of ``__main__`` that pickling ``value`` refers to (in order, unique)."""
    pickler = _MainReferences()
    pickler.dump(value)
    unique: dict[int, Any] = {}
    for obj in pickler.found:
        unique.setdefault(id(obj), obj)
    return list(unique.values())


def tensor_rows(value: Any, where: str):
    """``(where, rows)`` of every tensor in ``value`` (tuples, lists and dicts walked); rows None for 0-dim."""
    import torch

    if isinstance(value, torch.Tensor):
        yield where, (value.shape[0] if value.dim() else None)
    elif isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            yield from tensor_rows(item, f"{where}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from tensor_rows(item, f"{where}[{key!r}]")
