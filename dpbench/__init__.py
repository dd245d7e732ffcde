"""dpbench: benchmark data-parallel training strategies in PyTorch side by side.

The top-level names are loaded lazily so that ``import dpbench.report`` (which never
needs torch) stays light.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

__all__ = [
    "Workload",
    "get_workload",
    "launch",
    "list_strategies",
    "list_workloads",
    "__version__",
]

_LAZY = {
    "Workload": "dpbench.workloads",
    "get_workload": "dpbench.workloads",
    "list_workloads": "dpbench.workloads",
    "launch": "dpbench.launcher",
    "list_strategies": "dpbench.strategies",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dpbench' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__():
    return sorted(set(globals()) | set(__all__))
