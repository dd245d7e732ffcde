"""The config file of ``dpbench run``: ``[tool.dpbench]`` in pyproject.toml, or a dpbench.toml (its top
level) in the working directory — typed and validated; command-line options override it.

Keys (all optional)::

    workloads = ["my_models:tiny_net", {spec = "hf:gpt2@n_layer=2", global_batch = 8, seq_len = 32}]
    strategies = ["single", "ddp", "fsdp", "zero"]
    world_sizes = [1, 2]
    trials = 3                   # a fixed number of trials per case; without it, until settled:
    until_settled = true         # (the default) trials until the answer is settled,
    max_trials = 12              #   at most this many per case,
    budget = "30m"               #   no pass started past this wall-clock time (90s, 10m, 1h)
    profile = "quick"            # or "full"
    device = "cpu"               # or "cuda"
    precision = "fp32"           # or "bf16", "fp16": every strategy's precision option
    suites = ["throughput", "scaling", "sharding"]
    save = "run"
    results = "results"
    report = "report.html"

    [tool.dpbench.strategy_options.ddp]   # options of one strategy, as `dpbench list` shows them
    bucket_cap_mb = 25

Every error names the file, the key and what was expected.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ConfigError", "RunConfig", "SUITES", "WORKLOAD_SUITES", "find_config", "load_config", "read_config"]

SUITES = ("throughput", "scaling", "sharding", "ddp_knobs", "allreduce", "dp_phases", "comm", "convergence")
# A workload named on the command line gets the decision set: every strategy at its default options
# at each world size, at the workload's recipe (the throughput suite). Weak scaling, knob sweeps,
# collectives, DP phases and the sharding comparison (AdamW) answer other questions: --suites.
WORKLOAD_SUITES = ("throughput",)


class ConfigError(ValueError):
    """A config file or option dpbench cannot use; the message is one line."""


@dataclass(kw_only=True, frozen=True)
class RunConfig:
    """What ``dpbench run`` measures: the config file's values, then the command line's."""

    workloads: tuple[str, ...] = ()
    """Workload specs (empty: the profile's workloads)."""
    strategies: tuple[str, ...] | None = None
    """Strategy names (None: every strategy)."""
    world_sizes: tuple[int, ...] | None = None
    """World sizes (None: the profile's)."""
    trials: int | None = None
    """Fresh-process trials per case: a fixed design (None: trials until settled)."""
    until_settled: bool | None = None
    """Trials until the answer is settled (None: yes, unless ``trials`` is given)."""
    max_trials: int | None = None
    """Until settled: the most trials a case gets (None: the design's default, 12)."""
    budget: str | None = None
    """Until settled: the wall-clock budget, ``90s``/``10m``/``1h`` (None: 30 minutes)."""
    profile: str | None = None
    """``quick`` or ``full`` (None: full with CUDA, else quick)."""
    device: str | None = None
    """``cpu`` or ``cuda`` (None: cuda when visible)."""
    precision: str | None = None
    """Every strategy's ``precision`` option (None: its default, fp32)."""
    strategy_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Options per strategy name, applied to its cases in the throughput and scaling suites."""
    suites: tuple[str, ...] | None = None
    """Suites to run (None: all; with workloads named, those that measure them)."""
    save: str = "run"
    """The saved run's name."""
    results: str = "results"
    """The results directory (pytest-benchmark storage)."""
    report: str = "report.html"
    """The HTML report written after the run."""
    source: str | None = None
    """The config file read, if any."""

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}


def read_config(path: Path) -> tuple[Path, dict[str, Any]]:
    """``(path, table)`` of a named config file: a pyproject.toml's ``[tool.dpbench]``, else the file's top level."""
    data = _read(path)
    if path.name == "pyproject.toml":
        table = data.get("tool", {}).get("dpbench")
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: tool.dpbench: expected a table, found {'none' if table is None else table!r}")
        return path, table
    return path, data


def find_config(cwd: Path) -> tuple[Path, dict[str, Any]] | None:
    """``(file, table)`` of the working directory's dpbench.toml, else its pyproject.toml's
    ``[tool.dpbench]``; None when neither has one."""
    toml = cwd / "dpbench.toml"
    if toml.is_file():
        return toml, _read(toml)
    pyproject = cwd / "pyproject.toml"
    if pyproject.is_file():
        table = _read(pyproject).get("tool", {}).get("dpbench")
        if table is not None:
            if not isinstance(table, dict):
                raise ConfigError(f"{pyproject}: tool.dpbench: expected a table, found {type(table).__name__}")
            return pyproject, table
    return None


def _read(path: Path) -> dict[str, Any]:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        raise ConfigError(f"{path}: reading a config file needs Python >= 3.11 (tomllib)") from None
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None


def load_config(path: Path, table: dict[str, Any]) -> RunConfig:
    """Validate ``table`` (read from ``path``) into a :class:`RunConfig`."""
    prefix = "tool.dpbench." if path.name == "pyproject.toml" else ""
    known = {f.name for f in dataclasses.fields(RunConfig)} - {"source"}

    def fail(key: str, expected: str, value: Any) -> ConfigError:
        return ConfigError(f"{path}: {prefix}{key}: expected {expected}, found {value!r}")

    for key in table:
        if key not in known:
            from dpbench.workloads.spec_syntax import close_names

            raise ConfigError(f"{path}: {prefix}{key}: unknown key{close_names(key, sorted(known), what='keys')}")
    values: dict[str, Any] = {"source": str(path)}
    if "workloads" in table:
        raw = table["workloads"]
        if not isinstance(raw, list) or not raw:
            raise fail("workloads", "a non-empty list of specs or {spec, global_batch, seq_len} tables", raw)
        values["workloads"] = tuple(_workload(fail, i, item) for i, item in enumerate(raw))
    if "strategies" in table:
        values["strategies"] = _strings(fail, "strategies", table["strategies"])
    if "suites" in table:
        suites = _strings(fail, "suites", table["suites"])
        unknown = [s for s in suites if s not in SUITES]
        if unknown:
            raise fail("suites", f"names from {', '.join(SUITES)}", unknown[0])
        values["suites"] = suites
    if "world_sizes" in table:
        sizes = table["world_sizes"]
        if not isinstance(sizes, list) or not sizes or not all(_int(v) and v >= 1 for v in sizes):
            raise fail("world_sizes", "a non-empty list of ints >= 1", sizes)
        values["world_sizes"] = tuple(sizes)
    if "trials" in table:
        if not _int(table["trials"]) or table["trials"] < 1:
            raise fail("trials", "an int >= 1", table["trials"])
        values["trials"] = table["trials"]
    if "max_trials" in table:
        if not _int(table["max_trials"]) or table["max_trials"] < 1:
            raise fail("max_trials", "an int >= 1", table["max_trials"])
        values["max_trials"] = table["max_trials"]
    if "until_settled" in table:
        if not isinstance(table["until_settled"], bool):
            raise fail("until_settled", "true or false", table["until_settled"])
        values["until_settled"] = table["until_settled"]
    for key, choices in (
        ("budget", None),
        ("profile", ("quick", "full")),
        ("device", ("cpu", "cuda")),
        ("precision", None),
    ):
        if key in table:
            value = table[key]
            if not isinstance(value, str) or (choices and value not in choices):
                raise fail(key, " or ".join(map(repr, choices)) if choices else "a string", value)
            values[key] = value
    for key in ("save", "results", "report"):
        if key in table:
            if not isinstance(table[key], str) or not table[key]:
                raise fail(key, "a non-empty string", table[key])
            values[key] = table[key]
    if "strategy_options" in table:
        options = table["strategy_options"]
        if not isinstance(options, dict) or not all(isinstance(v, dict) for v in options.values()):
            raise fail("strategy_options", "a table of tables (strategy_options.ddp = {bucket_cap_mb = 25})", options)
        values["strategy_options"] = {str(k): dict(v) for k, v in options.items()}
    return RunConfig(**values)


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _strings(fail: Any, key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise fail(key, "a non-empty list of strings", value)
    return tuple(value)


def _workload(fail: Any, index: int, item: Any) -> str:
    key = f"workloads[{index}]"
    if isinstance(item, str) and item:
        return item
    if not isinstance(item, dict) or not isinstance(item.get("spec"), str):
        raise fail(key, "a spec string or a table with spec (and global_batch, seq_len)", item)
    extra = set(item) - {"spec", "global_batch", "seq_len"}
    if extra:
        raise fail(key, "only the keys spec, global_batch, seq_len", sorted(extra)[0])
    overrides = []
    for name in ("global_batch", "seq_len"):
        if name in item:
            if not _int(item[name]) or item[name] < 1:
                raise fail(f"{key}.{name}", "an int >= 1", item[name])
            overrides.append(f"{name}={item[name]}")
    spec = item["spec"]
    if overrides:
        spec += ("," if "@" in spec else "@") + ",".join(overrides)
    return spec
