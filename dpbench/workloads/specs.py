"""Workload specs: one string names any workload, wherever a workload is named.

``resolve_workload(spec)`` turns a spec into a :class:`~dpbench.workloads.Workload`:

- ``mlp`` — a registered name;
- ``MODULE:ATTR`` or ``path/to/file.py:ATTR`` — a ``Workload``, or a callable returning one;
- ``hf:MODEL_TYPE`` or ``hf:PATH`` — a Hugging Face ``transformers`` model built from its config
  (:mod:`dpbench.workloads.hf`).

Overrides follow ``@`` as ``key=value`` pairs joined by commas, the same for every kind and
safe in any shell without quotes: ``mlp@hidden=64``, ``my_models:tiny_net@hidden=64,depth=2``,
``hf:gpt2@n_layer=2,n_embd=64,seq_len=32``. Values are ints, floats, ``true``/``false``,
``none`` or strings; ``8x16x32`` is a tuple of ints where the field's default is a sequence.
In a comma-separated list of specs (``DPBENCH_WORKLOADS``, a config file's string) an item
``key=value`` continues the overrides of the spec before it, so ``hf:gpt2@n_layer=2,n_embd=64,mlp``
is two specs. ``global_batch=N`` is understood by every kind: the suites use that global batch
for this workload instead of the profile's.

The workloads of module and file specs are named by their spec; their parts call the user's
objects through a reference that each worker process resolves again (importing the module
there), so a user's lambdas and local classes work under every strategy.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import inspect
import os
import sys
from dataclasses import dataclass
from typing import Any

from dpbench.errors import did_you_mean
from dpbench.workloads.base import Workload
from dpbench.workloads.registry import builtin_factory, get_workload, list_workloads
from dpbench.workloads.spec_syntax import (
    GLOBAL_BATCH_KEY,
    SpecError,
    WorkloadSpec,
    close_names,
    parse_int_tuple,
    parse_spec,
)

__all__ = [
    "UserRef",
    "check_model_builds",
    "check_workload_specs",
    "meta_model",
    "meta_sizes",
    "parameter_count",
    "resolve_workload",
    "resolve_workload_specs",
    "user_batch",
    "user_loss",
    "user_model",
]


def resolve_workload(spec: str | Workload) -> Workload:
    """The ``Workload`` that ``spec`` names (a ``Workload`` is returned as it is).

    Every error is a :class:`SpecError` (a ``ValueError``) in one line, raised before any process
    starts. The model is not built here: :func:`meta_model` builds it on the meta device.
    """
    if isinstance(spec, Workload):
        return spec
    parsed = parse_spec(spec)
    overrides = dict(parsed.overrides)
    global_batch = overrides.pop(GLOBAL_BATCH_KEY, None)
    if parsed.kind == "hf":
        from dpbench.workloads.hf import hf_workload

        workload = hf_workload(parsed.target, overrides, spec=parsed.canonical)
    elif parsed.kind == "name":
        workload = _registered(parsed, overrides)
    else:
        workload = _user_workload(parsed, overrides)
    if global_batch is not None:
        if isinstance(global_batch, bool) or not isinstance(global_batch, int) or global_batch < 1:
            raise SpecError(
                f"workload spec {parsed.text!r}: global_batch: expected an int >= 1, found {global_batch!r}"
            )
        workload = dataclasses.replace(workload, global_batch=global_batch)
    params = {**workload.params, "spec": parsed.canonical}
    return dataclasses.replace(workload, params=params)


def resolve_workload_specs(source: str, specs: tuple[str, ...]) -> dict[str, Workload]:
    """Each spec's workload, spec by spec; else a :class:`SpecError` naming ``source`` and the problem."""
    if not specs:
        raise SpecError(f"{source}: expected at least one workload spec, found none")
    resolved = {}
    for spec in specs:
        try:
            resolved[spec] = resolved.get(spec) or resolve_workload(spec)
        except SpecError as exc:
            raise SpecError(f"{source}: {exc}") from None
    return resolved


def check_workload_specs(source: str, specs: tuple[str, ...]) -> tuple[str, ...]:
    """Return ``specs`` if each resolves to a workload; else a :class:`SpecError` naming ``source`` and the problem."""
    resolve_workload_specs(source, specs)
    return specs


def check_model_builds(source: str, specs: tuple[str, ...]) -> None:
    """Build each spec's model on the meta device (no memory): a model that cannot be built — a
    wrong-type override, a bug in its ``__init__`` — is a :class:`SpecError` naming ``source``,
    the spec, its overrides and the exception, before any process starts. A model that cannot be
    built on the meta device only (it reads a tensor's values, a kernel has no meta version) is left
    to its launch, where it is built on its device."""
    for spec in specs:
        try:
            meta_model(spec)
        except SpecError as exc:
            raise SpecError(f"{source}: {exc}") from None
        except Exception as exc:  # the user's code raised: anything it can raise
            if isinstance(exc, NotImplementedError) or "meta" in str(exc).lower():
                continue
            overrides = parse_spec(spec).overrides
            given = f" with {', '.join(f'{k}={v!r}' for k, v in overrides.items())}" if overrides else ""
            message = (str(exc).strip().splitlines() or [""])[0]
            raise SpecError(
                f"{source}: workload spec {spec!r}: its model cannot be built{given}: {type(exc).__name__}: {message}"
            ) from None


def meta_model(spec: str | Workload) -> Any:
    """The spec's model built on the meta device: its shapes and parameter count, no memory."""
    import torch

    workload = resolve_workload(spec)
    with torch.device("meta"):
        return workload.model()


def parameter_count(spec: str | Workload) -> int:
    """The number of parameters of the spec's model (built on the meta device)."""
    return meta_sizes(spec)[0]


def meta_sizes(spec: str | Workload) -> tuple[int, int]:
    """(parameters, buffer bytes) of the spec's model, built once on the meta device. The buffers
    are every one the module holds (BatchNorm's running statistics and counts, non-persistent ones
    too): what DDP's ``broadcast_buffers`` sends."""
    model = meta_model(spec)
    return (
        sum(p.numel() for p in model.parameters()),
        sum(b.numel() * b.element_size() for b in model.buffers()),
    )


def _registered(parsed: WorkloadSpec, overrides: dict[str, Any]) -> Workload:
    if parsed.target not in list_workloads():
        hint = did_you_mean(parsed.target, list_workloads(), most=3)
        if "." in parsed.target or "/" in parsed.target:
            hint = " (a module or a file needs :ATTR, e.g. my_models:tiny_net)"
        raise SpecError(
            f"Unknown workload {parsed.target!r}. Available names: {', '.join(list_workloads())}{hint}; "
            "other specs: MODULE:ATTR, path/to/file.py:ATTR, hf:MODEL_TYPE, hf:PATH"
        )
    if not overrides:
        return get_workload(parsed.target)
    factory = builtin_factory(parsed.target)
    if factory is None:
        raise SpecError(
            f"workload spec {parsed.text!r}: {parsed.target!r} is a registered Workload; it takes no overrides"
        )
    return _call_factory(parsed, factory, overrides)


def _call_factory(parsed: WorkloadSpec, factory: Any, overrides: dict[str, Any]) -> Any:
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        signature = None
    if signature is not None and not any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()):
        known = [n for n, p in signature.parameters.items() if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
        for key in overrides:
            if key not in known:
                raise SpecError(
                    f"workload spec {parsed.text!r}: override {key!r} is no argument of {_qualname(factory)}"
                    f"{close_names(key, known, what='arguments')}"
                )
        for key, value in list(overrides.items()):
            default = signature.parameters[key].default
            if isinstance(default, (tuple, list)) and isinstance(value, (str, int)):
                overrides[key] = parse_int_tuple(parsed.text, key, value)
    try:
        return factory(**overrides)
    except (TypeError, ValueError) as exc:
        raise SpecError(f"workload spec {parsed.text!r}: {_qualname(factory)}: {exc}") from None


def _qualname(obj: Any) -> str:
    return getattr(obj, "__qualname__", None) or type(obj).__name__


@dataclass(kw_only=True, frozen=True)
class UserRef:
    """How a worker finds a user's workload again: the module (or file) and attribute, the overrides,
    and the directory to import from."""

    kind: str
    target: str
    attr: str
    overrides: tuple[tuple[str, Any], ...]
    path: str


def _user_workload(parsed: WorkloadSpec, overrides: dict[str, Any]) -> Workload:
    if parsed.kind == "file":
        where = os.path.abspath(parsed.target)
        if not os.path.isfile(where):
            raise SpecError(f"workload spec {parsed.text!r}: expected a Python file, found no file {parsed.target!r}")
    else:
        where = os.getcwd()  # like `python -m`: a module in the working directory imports
    ref = UserRef(
        kind=parsed.kind, target=parsed.target, attr=parsed.attr, overrides=tuple(overrides.items()), path=where
    )
    workload = _load_user(ref, parsed)
    return Workload(
        model=functools.partial(user_model, ref),
        batch=functools.partial(user_batch, ref),
        loss=functools.partial(user_loss, ref),
        name=parsed.canonical,
        description=workload.description or f"{parsed.attr} from {parsed.target}",
        stateful=workload.stateful,
        tags=workload.tags,
        params={**workload.params, "workload_name": workload.name},
        global_batch=workload.global_batch,
    )


@functools.lru_cache(maxsize=32)
def _cached_user(ref: UserRef) -> Workload:
    return _load_user(ref, parse_spec(f"{ref.target}:{ref.attr}"))


def _load_user(ref: UserRef, parsed: WorkloadSpec) -> Workload:
    module = _import(ref, parsed)
    if not hasattr(module, ref.attr):
        names = [n for n, v in vars(module).items() if not n.startswith("_") and _is_workloadish(v)]
        raise SpecError(
            f"workload spec {parsed.text!r}: module {module.__name__!r} has no attribute {ref.attr!r}; "
            f"its Workload attributes: {', '.join(sorted(names)) or 'none'}"
        )
    value = getattr(module, ref.attr)
    overrides = dict(ref.overrides)
    if isinstance(value, Workload):
        if overrides:
            raise SpecError(
                f"workload spec {parsed.text!r}: {ref.attr} is a Workload, which takes no overrides; "
                f"make it a function returning one"
            )
        return value
    if not callable(value):
        raise SpecError(
            f"workload spec {parsed.text!r}: {ref.attr} is a {type(value).__name__}, expected a dpbench.Workload "
            f"or a callable returning one"
        )
    result = _call_factory(parsed, value, overrides)
    if not isinstance(result, Workload):
        raise SpecError(
            f"workload spec {parsed.text!r}: {ref.attr}() returned a {type(result).__name__}, "
            "expected a dpbench.Workload"
        )
    return result


def _is_workloadish(value: Any) -> bool:
    if isinstance(value, Workload):
        return True
    try:
        return inspect.signature(value).return_annotation in (Workload, "Workload")
    except (TypeError, ValueError):
        return False


def _import(ref: UserRef, parsed: WorkloadSpec) -> Any:
    if ref.kind == "file":
        directory, filename = os.path.split(ref.path)
        name = os.path.splitext(filename)[0]
        existing = sys.modules.get(name)
        if existing is not None and os.path.abspath(getattr(existing, "__file__", "") or "") == ref.path:
            return existing
        location = importlib.util.spec_from_file_location(name, ref.path)
        module = importlib.util.module_from_spec(location)
        sys.modules[name] = module  # so pickle and the module's own dataclasses find it by name
        try:
            location.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[name]
            raise SpecError(
                f"workload spec {parsed.text!r}: importing {ref.target} failed: {type(exc).__name__}: {exc}"
            ) from None
        return module
    if ref.path not in sys.path:
        sys.path.insert(0, ref.path)
    try:
        return importlib.import_module(ref.target)
    except ImportError as exc:
        raise SpecError(f"workload spec {parsed.text!r}: cannot import {ref.target!r}: {exc}") from None
    except Exception as exc:
        raise SpecError(
            f"workload spec {parsed.text!r}: importing {ref.target} failed: {type(exc).__name__}: {exc}"
        ) from None


def user_model(ref: UserRef) -> Any:
    """The user's model factory, found again in this process."""
    return _cached_user(ref).model()


def user_batch(ref: UserRef, step: int, global_batch: int, seed: int) -> Any:
    """The user's batch factory, found again in this process."""
    return _cached_user(ref).batch(step, global_batch, seed)


def user_loss(ref: UserRef, output: Any, target: Any) -> Any:
    """The user's loss, found again in this process."""
    return _cached_user(ref).loss(output, target)
