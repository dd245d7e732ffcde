"""The session's settings: what one measuring session measures and how many trials it runs, as one
typed, frozen value — built once, by :func:`build_settings`, from wherever a user sets it (``dpbench
run``'s command line and config file, the suites' ``--dpbench-*`` options, ``DPBENCH_*`` variables),
and handed to the pytest session as one JSON value (``--dpbench-settings``), which the session reads
back without parsing anything again.

The rules these settings follow live here once: the parsers of a trial count, a maximum, a budget
(and the duration text that says one back), and which trial designs exclude each other. The
command line, the config file, the suites' plugin and ``dpbench ab`` all call them.

It lives in ``measure/``, the lowest layer that knows every part it holds (the strategies' typed
options, the decision model's design, the profiles): the pytest plugin below ``runner/`` reads it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dpbench.decision.sequential import DEFAULT_MAX_TRIALS, fewest_max_trials

if TYPE_CHECKING:
    from dpbench.strategies.configs import StrategyConfig

__all__ = [
    "BUDGET_FORMS",
    "DEFAULT_MAX_TRIALS",
    "ENV",
    "SessionSettings",
    "build_settings",
    "check_design",
    "duration_text",
    "parse_budget",
    "parse_count",
    "parse_max_trials",
    "parse_trials",
]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smh])\s*$")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0}
BUDGET_FORMS = "90s, 10m, 1h"
"""The accepted forms of a budget, as errors list them."""

ENV = {
    "profile": "DPBENCH_PROFILE",
    "device": "DPBENCH_DEVICE",
    "world_sizes": "DPBENCH_WORLD_SIZES",
    "workloads": "DPBENCH_WORKLOADS",
    "strategies": "DPBENCH_STRATEGIES",
    "strategy_options": "DPBENCH_STRATEGY_OPTIONS",
    "trials": "DPBENCH_TRIALS",
}
"""Each setting the environment may give, and its variable: the lowest source, below every option."""
_DESIGN = ("trials", "until_settled", "max_trials", "budget")


# ---------------------------------------------------------------- the parsers, once
def _whole_number(raw: Any) -> int | None:
    """``raw`` written as a whole number (digits only, spaces around them allowed), else None."""
    text = str(raw).strip()
    return int(text) if text.isascii() and text.isdigit() else None


def parse_count(option: str, raw: Any, *, minimum: int, why: str = "") -> int:
    """A whole number of at least ``minimum``; else a ValueError naming ``option``, the minimum (and ``why``)."""
    value = _whole_number(raw)
    if value is None or value < minimum:
        raise ValueError(f"{option}: expected an int >= {minimum}{why}, found {raw!r}")
    return value


def parse_trials(option: str, raw: Any) -> int:
    """The suites' trial count (``--dpbench-trials``, ``DPBENCH_TRIALS``): an integer >= 1, else a
    ValueError naming ``option``."""
    value = _whole_number(raw)
    if value is None or value < 1:
        raise ValueError(f"{option} must be an integer >= 1 (fresh-process trials per case), got {raw!r}")
    return value


def parse_max_trials(option: str, raw: Any) -> int:
    """A maximum trial count, at least the smallest the sequential design accepts (and in its words:
    :func:`dpbench.decision.sequential.fewest_max_trials`)."""
    floor, why = fewest_max_trials()
    return parse_count(option, raw, minimum=floor, why=f" ({why})")


def parse_budget(option: str, raw: Any, *, forms: str = BUDGET_FORMS) -> float:
    """A wall-clock budget in seconds from ``90s``, ``10m``, ``1.5h``; a ValueError naming ``option``
    (``forms``: the examples the error lists)."""
    match = _DURATION.match(str(raw))
    seconds = float(match.group(1)) * _UNIT_S[match.group(2)] if match else 0.0
    if not seconds > 0:
        raise ValueError(f"{option}: expected a duration such as {forms}, found {raw!r}")
    return seconds


def duration_text(seconds: float, *, exact: bool = False) -> str:
    """``42 s``, ``8 min``, ``1.5 h``: a plan's durations, said roughly; ``exact``: ``42 s``,
    ``3 min 5 s``, ``1 h 2 min``, a job's elapsed time to the second."""
    if exact:
        s = max(0, round(seconds))
        if s < 60:
            return f"{s} s"
        if s < 3600:
            return f"{s // 60} min {s % 60} s"
        return f"{s // 3600} h {s % 3600 // 60} min"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def check_design(given: Mapping[str, Any], named: Callable[[str], str], *, settled_by_default: bool) -> None:
    """A fixed number of trials and trials until settled are not both asked for in one source.

    ``given``: the source's design keys that are set (``trials``, ``until_settled``, ``max_trials``,
    ``budget``); ``named``: how the source names each. ``settled_by_default`` (``dpbench run``):
    a maximum or a budget alone asks for trials until settled; otherwise (the suites) they need
    ``until_settled`` beside them."""
    trials = given.get("trials")
    if settled_by_default:
        for key in ("until_settled", "max_trials", "budget"):
            if given.get(key) and trials is not None:
                written = named("trials")
                raise ValueError(
                    f"{named(key)}: trials until the answer is settled, found with {written}"
                    f"{' ' if written.startswith('--') else ' = '}{trials} (a fixed number of trials per case): "
                    "choose one"
                )
        return
    if not given.get("until_settled"):
        for key in ("max_trials", "budget"):
            if given.get(key) is not None:
                raise ValueError(f"{named(key)}: expected it with {named('until_settled')}, found it alone")
    elif trials is not None:
        raise ValueError(
            f"{named('trials')}: a fixed number of trials, found with {named('until_settled')} (trials until "
            "settled): choose one"
        )


# ---------------------------------------------------------------- the value
@dataclass(frozen=True, kw_only=True)
class SessionSettings:
    """What one measuring session measures, and its trial design: every setting parsed, none raw."""

    profile: str | None = None
    """``quick`` or ``full`` (None: full with CUDA, else quick)."""
    device: str | None = None
    """``cpu`` or ``cuda`` (None: cuda when visible)."""
    world_sizes: tuple[int, ...] | None = None
    """The world sizes measured (None: the profile's, bounded by the machine or the torchrun world)."""
    workloads: tuple[str, ...] = ()
    """Workload specs (empty: the profile's)."""
    workloads_chosen: bool = False
    """The workloads were named for this session (``--dpbench-workload``, ``dpbench run``): every
    suite measures each of them. Else (``DPBENCH_WORKLOADS``) they replace the profile's, the first
    being the scaling and knob suites' one."""
    strategies: tuple[StrategyConfig, ...] = ()
    """The configurations measured, each holding its strategy's options dataclass (empty: every strategy)."""
    strategy_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Options per strategy name for the throughput and scaling suites' cases (e.g. every strategy's precision)."""
    trials: int | None = None
    """A fixed number of fresh-process trials per case (None: the profile's, or until settled)."""
    until_settled: bool = False
    """Trials until the answer is settled, up to ``max_trials`` within ``budget_s``."""
    max_trials: int = DEFAULT_MAX_TRIALS
    """Until settled: the most trials a case gets."""
    budget_s: float | None = None
    """Until settled: no trial pass starts that would end past this many seconds (None: no budget)."""
    run_config: dict[str, Any] | None = None
    """``dpbench run``'s resolved configuration (config file and options), saved with the run."""

    @property
    def workloads_named_by(self) -> str:
        """How errors name the workloads' source."""
        return "--dpbench-workload" if self.workloads_chosen else ENV["workloads"]

    def to_json(self) -> str:
        """The one value the pytest session is handed (``--dpbench-settings``)."""
        out = {key: getattr(self, key) for key in self.__dataclass_fields__}
        out["strategies"] = [c.to_json() for c in self.strategies]
        return json.dumps(out)  # in the fields' order, each dict in its own: nothing reordered

    @classmethod
    def from_json(cls, raw: str) -> SessionSettings:
        """The settings :meth:`to_json` wrote; a ValueError when ``raw`` is not such a value."""
        from dpbench.strategies.configs import StrategyConfig

        try:
            value = json.loads(raw)
            if set(value) != set(cls.__dataclass_fields__):
                raise KeyError(sorted(set(value) ^ set(cls.__dataclass_fields__)))
            value["strategies"] = tuple(StrategyConfig.from_json(c) for c in value["strategies"])
            for key in ("world_sizes", "workloads"):
                value[key] = None if value[key] is None else tuple(value[key])
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(
                f"--dpbench-settings: expected the JSON dpbench run writes, found {raw[:80]!r} ({exc})"
            ) from None
        return cls(**value)


# ---------------------------------------------------------------- the one adapter
def _world_sizes(option: str, raw: Any) -> tuple[int, ...]:
    if isinstance(raw, (list, tuple)):
        return tuple(raw)
    try:
        values = tuple(int(v) for v in str(raw).split(",") if v.strip())
    except ValueError:
        raise ValueError(f"{option} must be a comma-separated list of integers, got {raw!r}") from None
    if not values or any(v < 1 for v in values):
        raise ValueError(f"{option} must list integers >= 1, got {raw!r}")
    return values


def _strategy_options(option: str, raw: Any) -> dict[str, dict[str, Any]]:
    value = raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError:
            value = None
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        raise ValueError(f'{option}: expected JSON {{"strategy": {{"option": value}}}}, found {raw!r}')
    return {str(k): dict(v) for k, v in value.items()}


def _profile(option: str, raw: Any) -> str:
    from dpbench.schema import Profile

    if raw not in [p.value for p in Profile]:
        raise ValueError(f"{option} must be one of {[p.value for p in Profile]}, got {raw!r}")
    return raw


def _device(option: str, raw: Any) -> str:
    if raw not in ("cpu", "cuda"):
        raise ValueError(f"{option} must be 'cpu' or 'cuda', got {raw!r}")
    return raw


def build_settings(
    given: Mapping[str, Any],
    *,
    named: Callable[[str], str],
    environ: Mapping[str, str],
    settled_by_default: bool,
    default_budget: str | None = None,
    max_world: Callable[[SessionSettings], int] | None = None,
) -> SessionSettings:
    """The session's settings from one source of options over the environment.

    ``given``: the options' raw values by setting name (``trials``, ``until_settled``,
    ``max_trials``, ``budget``, ``profile``, ``device``, ``world_sizes``, ``workloads``,
    ``strategies``, ``strategy_options``, ``run_config``), unset ones left out or None; ``named``:
    how the source names each in errors. The environment's ``DPBENCH_*`` (:data:`ENV`) fill in
    what the options leave unset; its trial count only for a fixed design.
    ``settled_by_default``: ``dpbench run``'s default design (until settled) instead of the suites'
    (a fixed number of trials). ``max_world``: the largest world size the configurations are
    checked at (default: the largest of ``world_sizes``, else 2); ``default_budget``: the budget of
    trials until settled when none is given."""
    given = {k: v for k, v in given.items() if v is not None and v != ()}
    env = {key: environ[var] for key, var in ENV.items() if environ.get(var)}

    def source(key: str) -> tuple[Any, str] | None:
        if key in given:
            return given[key], named(key)
        if key in env:
            return env[key], ENV[key]
        return None

    values: dict[str, Any] = {}
    if found := source("profile"):
        values["profile"] = _profile(found[1], found[0])
    if found := source("device"):
        values["device"] = _device(found[1], found[0])
    if found := source("world_sizes"):
        values["world_sizes"] = _world_sizes(found[1], found[0])
    if found := source("strategy_options"):
        values["strategy_options"] = _strategy_options(found[1], found[0])
    if found := source("workloads"):
        specs = found[0]
        if isinstance(specs, str):
            from dpbench.workloads.spec_syntax import split_specs

            specs = split_specs(specs)
        values["workloads"] = tuple(specs)
        values["workloads_chosen"] = "workloads" in given
    if "run_config" in given:
        values["run_config"] = dict(given["run_config"])
    if found := source("strategies"):
        from dpbench.strategies.configs import parse_configs

        placed = SessionSettings(**values)  # the world sizes the configurations are checked at
        world = max_world(placed) if max_world else max(placed.world_sizes or (2,))
        values["strategies"] = parse_configs(found[1], found[0], world_size=world)
    return SessionSettings(**values, **_design(given, env, named, settled_by_default, default_budget))


def _design(
    given: Mapping[str, Any],
    env: Mapping[str, str],
    named: Callable[[str], str],
    settled_by_default: bool,
    default_budget: str | None,
) -> dict[str, Any]:
    """The trial design's settings: a fixed number of trials, or trials until settled with a maximum
    and a budget; the environment's trial count only where the options ask for neither."""
    design = {k: given[k] for k in _DESIGN if k in given}
    check_design(design, named, settled_by_default=settled_by_default)
    if "until_settled" in design:
        until = bool(design["until_settled"])
    else:  # dpbench run: a maximum or a budget alone asks for trials until settled, as nothing at all does
        until = settled_by_default and "trials" not in design
    if until:
        out: dict[str, Any] = {"until_settled": True}
        if "max_trials" in design:
            out["max_trials"] = parse_max_trials(named("max_trials"), design["max_trials"])
        budget = design.get("budget", default_budget)
        if budget is not None:
            out["budget_s"] = parse_budget(named("budget"), budget)
        return out
    if "trials" in design:
        return {"trials": parse_trials(named("trials"), design["trials"])}
    if "trials" in env:
        return {"trials": parse_trials(ENV["trials"], env["trials"])}
    return {}
