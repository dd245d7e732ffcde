"""Names and ``params`` of factory-built workloads: the plain name for the defaults, sizes spelled out otherwise.

``mlp_workload(hidden=128, layers=2)`` is ``mlp-hidden128-layers2``: results of two sizes must
never share a name, and the defaults keep the plain name so runs saved before stay comparable.
Each non-default argument adds ``-<key><value>`` in the factory's argument order (``<key>_<value>``
when the key ends in a digit: ``conv2_16``); sequences join with ``x`` (``widths8x16x32x64``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from dpbench.workloads._validate import json_params

__all__ = ["variant"]


def variant(base: str, factory: Callable[..., Any], **values: Any) -> tuple[str, dict[str, Any]]:
    """``(name, params)`` of the workload ``factory(**values)`` builds; ``values`` are already checked."""
    params = json_params(values)
    defaults = json_params(
        {
            name: p.default
            for name, p in inspect.signature(factory).parameters.items()
            if p.default is not p.empty and name in values
        }
    )
    order = [name for name in inspect.signature(factory).parameters if name in params]
    suffix = [_label(name, params[name]) for name in order if defaults.get(name, object()) != params[name]]
    return "-".join([base, *suffix]), {name: params[name] for name in order}


def _label(key: str, value: Any) -> str:
    text = "x".join(map(str, value)) if isinstance(value, list) else str(value)
    return f"{key}_{text}" if key[-1].isdigit() else f"{key}{text}"
