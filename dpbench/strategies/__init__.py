"""strategies: how replicas are made and gradients synced — one file per strategy behind the
small :class:`Strategy` base, looked up by its stable name (``dpbench.schema.StrategyName``), plus
what runs inside the workers for them (phase timing, precision, compile, FLOP counting and peaks
in ``_metrics``, the case metrics in ``profiling``). Everything strategy-specific lives here,
including what the parent reads before anything runs, torch-free: the options, the placement,
the memory estimate and the step schedule (:mod:`~dpbench.strategies.schedule`: what one step
issues, which ``dpbench.predict`` replays without knowing the strategy's name).

May import: ``dpbench.parallel`` (``dp``), workloads, ``dpbench.schema``. Never the launcher,
the measuring engine or anything above: a strategy does not know how its processes started.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dpbench.schema import StrategyName
from dpbench.strategies._options import CommonOptions, OptionDoc, describe_options
from dpbench.strategies.base import Placement, RunSpec, Strategy
from dpbench.strategies.errors import StrategyUnavailable
from dpbench.strategies.schedule import BucketSync, ShardedUnits, StepSchedule

__all__ = [
    "Strategy",
    "StrategyUnavailable",
    "Placement",
    "RunSpec",
    "CommonOptions",
    "OptionDoc",
    "describe_options",
    "BucketSync",
    "ShardedUnits",
    "StepSchedule",
    "get_strategy",
    "list_strategies",
    "scheduled_strategies",
    "step_schedule",
]

# name -> "module:Class"; imported on first use so listing names stays cheap. The names are
# schema.StrategyName's (saved identifiers), defined there only.
_REGISTRY = {
    StrategyName.SINGLE.value: "dpbench.strategies.single:Single",
    StrategyName.DP.value: "dpbench.strategies.dp:DP",
    StrategyName.TORCH_DP.value: "dpbench.strategies.torch_dp:TorchDP",
    StrategyName.DDP.value: "dpbench.strategies.ddp:DDP",
    StrategyName.MANUAL.value: "dpbench.strategies.manual:Manual",
    StrategyName.ALLREDUCE.value: "dpbench.strategies.allreduce:AllReduce",
    StrategyName.FSDP.value: "dpbench.strategies.fsdp:FSDP",
    StrategyName.ZERO.value: "dpbench.strategies.zero:Zero",
}


def list_strategies() -> list[str]:
    """The registered strategy names, in the order results list them."""
    return list(_REGISTRY)


def step_schedule(name: str, options: Mapping[str, Any]) -> StepSchedule | None:
    """The :class:`StepSchedule` strategy ``name`` declares for a case's resolved ``options`` (as saved
    results record them); None for a strategy without one, or a name this version does not register."""
    if name not in _REGISTRY:
        return None
    cls = get_strategy(name)
    return cls.step_schedule(cls.options_type.from_saved(options))


def scheduled_strategies() -> list[str]:
    """The registered strategies that declare a step schedule (at their default options), in registry order."""
    return [name for name in _REGISTRY if step_schedule(name, {}) is not None]


def get_strategy(name: str) -> type[Strategy]:
    """The :class:`Strategy` subclass registered as ``name``."""
    import importlib

    target = _REGISTRY.get(name) if isinstance(name, str) else None
    if target is None:
        raise ValueError(f"Unknown strategy {name!r}. Available names: {', '.join(_REGISTRY)}")
    module_name, class_name = target.split(":")
    return getattr(importlib.import_module(module_name), class_name)
