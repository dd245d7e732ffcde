"""The workload registry: names → ``Workload`` (the built-ins and a user's own), and the factories
that build the built-ins with overrides (``mlp@hidden=64``)."""

from __future__ import annotations

import threading

from dpbench.workloads.base import Workload, check_picklable
from dpbench.workloads.dict_model import dict_model_workload
from dpbench.workloads.lenet import lenet_workload
from dpbench.workloads.mlp import mlp_workload
from dpbench.workloads.resnet import resnet18_workload
from dpbench.workloads.transformer import transformer_workload

__all__ = [
    "UnknownWorkloadError",
    "builtin_factory",
    "check_workload_names",
    "get_workload",
    "list_workloads",
    "register_workload",
    "unregister_workload",
]


class UnknownWorkloadError(KeyError, ValueError):
    """A workload name that is not registered (catch it as ``KeyError`` or ``ValueError``)."""

    def __str__(self) -> str:
        # KeyError's str() would wrap the message in quotes; show it as written.
        return str(self.args[0]) if self.args else ""


_REGISTRY: dict[str, Workload] = {}
_LOCK = threading.Lock()


def _unknown(name: str) -> UnknownWorkloadError:
    return UnknownWorkloadError(f"Unknown workload {name!r}. Available names: {', '.join(list_workloads())}")


def list_workloads() -> list[str]:
    """The registered workload names, sorted."""
    with _LOCK:
        return sorted(_REGISTRY)


def get_workload(name: str) -> Workload:
    """The registered ``Workload`` called ``name``; an unknown name lists the available ones."""
    if not isinstance(name, str):
        raise TypeError(f"workload name must be a str, got {type(name).__name__} {name!r}")
    with _LOCK:
        workload = _REGISTRY.get(name)
    if workload is None:
        raise _unknown(name)
    return workload


def register_workload(workload: Workload, *, replace: bool = False) -> Workload:
    """Register ``workload`` under ``workload.name`` and return it.

    Registering a name that exists raises ``ValueError`` unless ``replace=True``. The workload
    must be picklable (it is sent to worker processes), checked here so the error comes early.
    """
    if not isinstance(workload, Workload):
        raise TypeError(f"workload must be a dpbench.Workload, got {type(workload).__name__}")
    check_picklable(workload)  # the name was checked when the Workload was made
    with _LOCK:
        if workload.name in _REGISTRY and not replace:
            raise ValueError(
                f"A workload named {workload.name!r} is already registered; "
                "pass replace=True to replace it, or give yours another name"
            )
        _REGISTRY[workload.name] = workload
    return workload


def check_workload_names(source: str, names: tuple[str, ...]) -> tuple[str, ...]:
    """Return ``names`` if each is registered; else ``ValueError`` naming ``source``, the unknown and the
    known names."""
    known = list_workloads()
    unknown = [name for name in names if name not in known]
    if not names or unknown:
        found = "no name" if not names else "unknown workload(s) " + ", ".join(map(repr, unknown))
        raise ValueError(f"{source} names {found}. Known names: {', '.join(known)}")
    return names


def builtin_factory(name: str):
    """The factory that builds the built-in workload ``name`` with overrides (None for others)."""
    return _FACTORIES.get(name)


def unregister_workload(name: str) -> Workload:
    """Remove and return the workload registered as ``name`` (``UnknownWorkloadError`` if none)."""
    with _LOCK:
        workload = _REGISTRY.pop(name, None)
    if workload is None:
        raise _unknown(name)
    return workload


_FACTORIES = {
    "mlp": mlp_workload,
    "lenet": lenet_workload,
    "resnet18": resnet18_workload,
    "transformer": transformer_workload,
    "dict_model": dict_model_workload,
}
for _factory in _FACTORIES.values():
    register_workload(_factory())
del _factory
