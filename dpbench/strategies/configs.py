"""Strategy configurations named the way workload specs are: ``ddp@bucket_cap_mb=100`` is DDP with
that option, ``fsdp@reshard_after_forward=false,shard=layer`` FSDP with two. A list of them is what
``dpbench run --strategies``, ``[tool.dpbench] strategies`` and the suites' ``--dpbench-strategies``
take; each configuration becomes its own case, named by its options.

In a comma-separated list a ``key=value`` item continues the configuration before it
(``single,ddp@bucket_cap_mb=100,static_graph=true,fsdp``: three configurations), as in a list of
workload specs; values are read as there (ints, floats, ``true``/``false``, ``none``, else text).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dpbench.errors import did_you_mean, expected_names_from
from dpbench.workloads.spec_syntax import parse_value, split_specs

__all__ = ["StrategyConfig", "parse_configs"]


@dataclass(frozen=True, kw_only=True)
class StrategyConfig:
    """One strategy with the options a user named for it."""

    strategy: str
    options: tuple[tuple[str, Any], ...] = ()
    """The named options, in the order given (the rest keep the strategy's defaults)."""

    @property
    def spec(self) -> str:
        """The configuration written back: ``ddp@bucket_cap_mb=100``."""
        if not self.options:
            return self.strategy
        return self.strategy + "@" + ",".join(f"{k}={_format(v)}" for k, v in self.options)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.options)


def _format(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) or value is None else str(value)


def parse_configs(what: str, raw: str | Sequence[str], *, world_size: int = 2) -> tuple[StrategyConfig, ...]:
    """The configurations of ``raw`` (a comma-separated list or its items), each a known strategy
    whose options it takes with values it accepts at ``world_size`` ranks; else a ValueError in one
    line naming ``what``, the configuration and the closest names."""
    from dpbench.schema import StrategyName
    from dpbench.strategies import StrategyUnavailable, get_strategy

    known = [s.value for s in StrategyName]
    items = split_specs(raw if isinstance(raw, str) else ",".join(raw))
    if not items:
        raise ValueError(f"{what}: expected strategy names from {', '.join(known)}, found {raw!r}")
    configs = []
    for item in items:
        name, at, tail = item.partition("@")
        name = name.strip()
        if name not in known:
            raise ValueError(expected_names_from(what, name, known, what="strategy names"))
        options: dict[str, Any] = {}
        for pair in tail.split(",") if at else ():
            key, eq, value = pair.partition("=")
            key = key.strip()
            if not eq or not key:
                raise ValueError(f"{what}: {item!r}: expected {name}@option=value,option=value, found {pair!r}")
            if key in options:
                raise ValueError(f"{what}: {item!r}: option {key!r} is given twice")
            options[key] = parse_value(value.strip())
        cls = get_strategy(name)
        own = list(cls.option_defaults)
        unknown = [k for k in options if k not in own]
        if unknown:
            raise ValueError(
                f"{what}: {item!r}: {name} has no option {unknown[0]!r}{did_you_mean(unknown[0], own)}; "
                f"its options: {', '.join(own)}"
            )
        try:
            cls.parse_options(options, device="cpu", world_size=world_size, global_batch=max(64, world_size))
        except StrategyUnavailable:
            pass  # a value this machine cannot run (fp16 on CPU): the case says so when it runs
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{what}: {item!r}: {exc}") from None
        configs.append(StrategyConfig(strategy=name, options=tuple(options.items())))
    return tuple(configs)
