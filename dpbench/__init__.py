"""dpbench: benchmark data-parallel training strategies in PyTorch side by side.

The top-level names are loaded lazily so that ``import dpbench.report`` (which never
needs torch) stays light.

PYTEST_DONT_REWRITE: dpbench is a pytest plugin (its measuring plugin), which pytest would
rewrite for asserts; dpbench has none, and the cluster runner imports dpbench before it starts
pytest, which pytest would warn about.
"""

from __future__ import annotations

from dpbench._lazy import lazy_attributes
from dpbench.schema import __version__

__all__ = [
    "Workload",
    "get_workload",
    "launch",
    "list_strategies",
    "list_workloads",
    "resolve_workload",
    "__version__",
]

_LAZY = {
    "Workload": "dpbench.workloads",
    "get_workload": "dpbench.workloads",
    "list_workloads": "dpbench.workloads",
    "resolve_workload": "dpbench.workloads",
    "launch": "dpbench.launcher",
    "list_strategies": "dpbench.strategies",
}


__getattr__, __dir__ = lazy_attributes("dpbench", _LAZY, __all__, globals())
