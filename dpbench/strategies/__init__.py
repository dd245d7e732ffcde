"""strategies: how replicas are made and gradients synced — one file per strategy behind the
small :class:`Strategy` base, looked up by its stable name (``dpbench.schema.StrategyName``), plus
what runs inside the workers for them (phase timing, precision, compile, FLOP counting and peaks
in ``_metrics``, the case metrics in ``_profiling``).

May import: ``dpbench.parallel`` (``dp``), workloads, ``dpbench.schema``. Never the launcher,
the measuring engine or anything above: a strategy does not know how its processes started.
"""

from __future__ import annotations

from dpbench.strategies._options import CommonOptions, OptionDoc, describe_options
from dpbench.strategies.base import Placement, RunSpec, Strategy
from dpbench.strategies.errors import StrategyUnavailable

__all__ = [
    "Strategy",
    "StrategyUnavailable",
    "Placement",
    "RunSpec",
    "CommonOptions",
    "OptionDoc",
    "describe_options",
    "get_strategy",
    "list_strategies",
]

# name -> "module:Class"; imported on first use so listing names stays cheap.
_REGISTRY = {
    "single": "dpbench.strategies.single:Single",
    "dp": "dpbench.strategies.dp:DP",
    "torch-dp": "dpbench.strategies.torch_dp:TorchDP",
    "ddp": "dpbench.strategies.ddp:DDP",
    "manual": "dpbench.strategies.manual:Manual",
    "allreduce": "dpbench.strategies.allreduce:AllReduce",
    "fsdp": "dpbench.strategies.fsdp:FSDP",
    "zero": "dpbench.strategies.zero:Zero",
}


def list_strategies() -> list[str]:
    """The registered strategy names, in the order results list them."""
    return list(_REGISTRY)


def get_strategy(name: str) -> type[Strategy]:
    """The :class:`Strategy` subclass registered as ``name``."""
    import importlib

    target = _REGISTRY.get(name) if isinstance(name, str) else None
    if target is None:
        raise ValueError(f"Unknown strategy {name!r}. Available names: {', '.join(_REGISTRY)}")
    module_name, class_name = target.split(":")
    return getattr(importlib.import_module(module_name), class_name)
