"""Strategy configurations named the way workload specs are: ``ddp@bucket_cap_mb=100`` is DDP with
that option, ``fsdp@reshard_after_forward=false,shard=layer`` FSDP with two. A list of them is what
``dpbench run --strategies``, ``[tool.dpbench] strategies`` and the suites' ``--dpbench-strategies``
take; each configuration becomes its own case, named by its options.

In a comma-separated list a ``key=value`` item continues the configuration before it
(``single,ddp@bucket_cap_mb=100,static_graph=true,fsdp``: three configurations), as in a list of
workload specs; values are read as there (ints, floats, ``true``/``false``, ``none``, else text).

A configuration is parsed once, where it is named (:func:`parse_configs`): it holds the strategy's
options dataclass from then on, and crosses a process boundary as JSON (:meth:`StrategyConfig.to_json`),
rebuilt on the other side without being parsed again. ``dpbench.launch`` and ``dpbench estimate``
read the same syntax (:func:`split_config`, :func:`merge_options`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dpbench.errors import did_you_mean, expected_names_from
from dpbench.workloads.spec_syntax import parse_value, split_specs

if TYPE_CHECKING:
    from dpbench.strategies._options import CommonOptions

__all__ = ["StrategyConfig", "merge_options", "parse_configs", "split_config"]


@dataclass(frozen=True, kw_only=True)
class StrategyConfig:
    """One strategy with the options a user named for it."""

    strategy: str
    """The strategy's registered name."""
    options: tuple[tuple[str, Any], ...] = ()
    """The named options, in the order given (the rest keep the strategy's defaults)."""
    typed: CommonOptions | None = field(default=None, compare=False, repr=False)
    """The strategy's options dataclass holding them, the defaults filled in (built from ``options``
    when not given); :func:`parse_configs` checked its values."""

    def __post_init__(self) -> None:
        if self.typed is None:
            from dpbench.strategies import get_strategy

            # Built, not checked: a configuration built by hand or read back from JSON was checked where it was named.
            object.__setattr__(self, "typed", get_strategy(self.strategy).options_type(**dict(self.options)))

    @property
    def spec(self) -> str:
        """The configuration written back: ``ddp@bucket_cap_mb=100``."""
        if not self.options:
            return self.strategy
        return self.strategy + "@" + ",".join(f"{k}={_format(v)}" for k, v in self.options)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.options)

    def to_json(self) -> dict[str, Any]:
        """The configuration as JSON: its strategy and named options as pairs, in the order given (its
        :attr:`spec` names the case), from which the typed value is rebuilt."""
        return {"strategy": self.strategy, "options": [[key, value] for key, value in self.options]}

    @classmethod
    def from_json(cls, value: Any) -> StrategyConfig:
        """The configuration :meth:`to_json` wrote."""
        return cls(strategy=str(value["strategy"]), options=tuple((str(k), v) for k, v in value["options"]))


def _format(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) or value is None else str(value)


def split_config(what: str, item: str) -> tuple[str, dict[str, Any]]:
    """``ddp@bucket_cap_mb=100,static_graph=true`` → ``("ddp", {"bucket_cap_mb": 100, "static_graph": True})``:
    the syntax only (the strategy and option names are the caller's to check); a ValueError in one
    line naming ``what`` and the item."""
    name, at, tail = item.partition("@")
    name = name.strip()
    options: dict[str, Any] = {}
    for pair in tail.split(",") if at else ():
        key, eq, value = pair.partition("=")
        key = key.strip()
        if not eq or not key:
            raise ValueError(f"{what}: {item!r}: expected {name}@option=value,option=value, found {pair!r}")
        if key in options:
            raise ValueError(f"{what}: {item!r}: option {key!r} is given twice")
        options[key] = parse_value(value.strip())
    return name, options


def merge_options(spec: str, named: dict[str, Any], given: Mapping[str, Any], *, given_as: str) -> dict[str, Any]:
    """The options a configuration ``spec`` names and those ``given`` beside it (keywords, a command's
    options), together; an option in both is a ValueError naming it, its two values and where each came from."""
    both = [key for key in named if key in given]
    if both:
        key = both[0]
        raise ValueError(
            f"{key}: expected it in {spec!r} or in {given_as}, found it in both "
            f"({_format(named[key])} and {given[key]!r})"
        )
    return {**named, **given}


def parse_configs(what: str, raw: str | Sequence[str], *, world_size: int = 2) -> tuple[StrategyConfig, ...]:
    """The configurations of ``raw`` (a comma-separated list or its items), each a known strategy
    whose options it takes with values it accepts at ``world_size`` ranks; else a ValueError in one
    line naming ``what``, the configuration and the closest names. Each holds its typed options."""
    from dpbench.schema import StrategyName
    from dpbench.strategies import StrategyUnavailable, get_strategy

    known = [s.value for s in StrategyName]
    items = split_specs(raw if isinstance(raw, str) else ",".join(raw))
    if not items:
        raise ValueError(f"{what}: expected strategy names from {', '.join(known)}, found {raw!r}")
    configs = []
    for item in items:
        name = item.partition("@")[0].strip()
        if name not in known:
            raise ValueError(expected_names_from(what, name, known, what="strategy names"))
        name, options = split_config(what, item)
        cls = get_strategy(name)
        own = list(cls.option_defaults)
        unknown = [k for k in options if k not in own]
        if unknown:
            raise ValueError(
                f"{what}: {item!r}: {name} has no option {unknown[0]!r}{did_you_mean(unknown[0], own)}; "
                f"its options: {', '.join(own)}"
            )
        typed = cls.options_type(**options)
        try:
            typed.check(device="cpu", world_size=world_size, global_batch=max(64, world_size))
        except StrategyUnavailable:
            pass  # a value this machine cannot run (fp16 on CPU): the case says so when it runs
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{what}: {item!r}: {exc}") from None
        configs.append(StrategyConfig(strategy=name, options=tuple(options.items()), typed=typed))
    return tuple(configs)
