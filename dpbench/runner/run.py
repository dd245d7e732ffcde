"""What ``dpbench run`` does: the packaged suites (``pytest --pyargs dpbench.suites``, with dpbench's
measuring plugin) on the workloads, strategies and world sizes asked for, then the saved run, the
HTML report and the decision in the terminal. The subcommand's options are :mod:`dpbench.commands.run`.

Everything asked for is checked before any process starts — each workload spec resolves, each
strategy and its options exist, the config file is valid — and a problem is one line and exit 2.
The session's settings are parsed once, here (:func:`dpbench.measure.settings.build_settings`),
and handed to pytest as one JSON value.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from dpbench._atomic import no_empty_directories
from dpbench._children import dies_with_us, stop_signals, wait_stopping
from dpbench.errors import check_choice, check_names
from dpbench.measure.plugin.failures import failure_files, first_failure_line
from dpbench.measure.settings import SessionSettings, build_settings, check_design
from dpbench.runner.config import (
    SUITES,
    WORKLOAD_SUITES,
    ConfigError,
    RunConfig,
    find_config,
    load_config,
    read_config,
)

__all__ = [
    "DEFAULT_BUDGET",
    "EXIT_INPUT",
    "RunOptions",
    "RunPlan",
    "nothing_saved_line",
    "pytest_command",
    "resolve_run",
    "resolve_run_config",
    "run",
]

EXIT_INPUT = 2
TESTS_FAILED = 1  # pytest.ExitCode.TESTS_FAILED: the parent reads pytest's exit without importing pytest
DEFAULT_BUDGET = "30m"
"""Until settled, the wall-clock budget when none is given."""


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """``dpbench run``'s command line, as given (None: not given; the config file's or the default applies)."""

    workloads: tuple[str, ...] = ()
    """``--workload`` specs, in order."""
    strategies: str | None = None
    """``--strategies``: comma-separated configurations."""
    world_sizes: str | None = None
    """``--world-sizes``: comma-separated ints."""
    suites: str | None = None
    """``--suites``: comma-separated suite names."""
    trials: int | None = None
    """``--trials``: a fixed number of trials per case."""
    until_settled: bool | None = None
    """``--until-settled``."""
    max_trials: str | None = None
    """``--max-trials``, unparsed."""
    budget: str | None = None
    """``--budget``, unparsed."""
    profile: str | None = None
    """``--profile``."""
    device: str | None = None
    """``--device``."""
    precision: str | None = None
    """``--precision``."""
    save: str | None = None
    """``--save``."""
    results: str | None = None
    """``--results``."""
    report: str | None = None
    """``--report``."""
    config: str | None = None
    """``--config``: a config file instead of the working directory's."""


@dataclass(frozen=True, kw_only=True)
class RunPlan:
    """What one ``dpbench run`` measures: the configuration as the user wrote it, and the session's settings parsed."""

    config: RunConfig
    """The config file's settings with the command line's on top (saved with the run as ``run_config``)."""
    settings: SessionSettings
    """The same, parsed: what the pytest session is handed."""


def _list(option: str, raw: str | None) -> tuple[str, ...] | None:
    if raw is None:
        return None
    items = tuple(v.strip() for v in raw.split(",") if v.strip())
    if not items:
        raise ConfigError(f"{option}: expected a comma-separated list, found {raw!r}")
    return items


_OPTIONS = {"workloads": "--workload"}
"""How an error names a setting the command line gave, where it is not ``--`` and its key."""


def _option(key: str) -> str:
    return _OPTIONS.get(key, f"--{key.replace('_', '-')}")


def resolve_run(options: RunOptions, cwd: Path, environ: Mapping[str, str] | None = None) -> RunPlan:
    """The config file's settings with the command line's on top, every part checked, and the
    session's settings parsed from them (``environ``'s ``DPBENCH_*`` fill in what neither sets)."""
    if options.config:
        path = Path(options.config)
        if not path.is_file():
            raise ConfigError(f"--config: expected a config file, found no file {options.config}")
        found = read_config(path)
    else:
        found = find_config(cwd)
    config = load_config(*found) if found else RunConfig()
    changes: dict = {}
    if options.workloads:
        changes["workloads"] = tuple(options.workloads)
    if options.strategies:  # configurations: "single,ddp@bucket_cap_mb=100,static_graph=true"
        from dpbench.workloads.spec_syntax import split_specs

        changes["strategies"] = split_specs(options.strategies) or _list("--strategies", options.strategies)
    if options.world_sizes:
        sizes = _list("--world-sizes", options.world_sizes)
        if not all(s.isdigit() and int(s) >= 1 for s in sizes):
            raise ConfigError(f"--world-sizes: expected comma-separated ints >= 1, found {options.world_sizes!r}")
        changes["world_sizes"] = tuple(int(s) for s in sizes)
    if options.suites:
        changes["suites"] = _list("--suites", options.suites)
    changes.update(_design(options))
    for key in ("profile", "device", "precision", "save", "results", "report"):
        if getattr(options, key) is not None:
            changes[key] = getattr(options, key)
    config = dataclasses.replace(config, **changes)

    def named(key: str) -> str:
        return _option(key) if key in changes else _file_key(config, key)

    _check_workloads(config, named)
    settings = build_settings(
        {
            "workloads": config.workloads,
            "strategies": config.strategies,
            "world_sizes": config.world_sizes,
            "profile": config.profile,
            "device": config.device,
            "strategy_options": _strategy_options(config) or None,
            **{key: getattr(config, key) for key in ("trials", "until_settled", "max_trials", "budget")},
        },
        named=named,
        environ=os.environ if environ is None else environ,
        settled_by_default=True,
        default_budget=DEFAULT_BUDGET,
    )
    _check(config, named, device=settings.device)
    if config.max_trials is not None:  # saved with the run as a number, as the settings read it
        config = dataclasses.replace(config, max_trials=settings.max_trials)
    return RunPlan(config=config, settings=dataclasses.replace(settings, run_config=config.to_dict()))


def resolve_run_config(options: RunOptions, cwd: Path) -> RunConfig:
    """The config file's settings with the command line's on top, every part checked."""
    return resolve_run(options, cwd).config


def _design(options: RunOptions) -> dict:
    """The command line's trial design, over the config file's: ``--trials N`` a fixed design;
    ``--until-settled`` (with ``--max-trials``, ``--budget``) trials until settled. Both: refused
    (:func:`dpbench.measure.settings.check_design`)."""
    settled = {"until_settled": options.until_settled, "max_trials": options.max_trials, "budget": options.budget}
    given = {key: value for key, value in settled.items() if value}
    check_design({**given, "trials": options.trials}, _option, settled_by_default=True)
    if options.trials is not None:
        return {"trials": options.trials, "until_settled": False, "max_trials": None, "budget": None}
    if not given:
        return {}
    return {"until_settled": True, "trials": None, **{k: v for k, v in given.items() if k != "until_settled"}}


def _file_key(config: RunConfig, key: str) -> str:
    """How an error names a setting the config file gave: the file, then the key as written there."""
    if config.source is None:
        return key
    prefix = "tool.dpbench." if Path(config.source).name == "pyproject.toml" else ""
    return f"{config.source}: {prefix}{key}"


def _check_workloads(config: RunConfig, named: Callable[[str], str]) -> None:
    """Each workload spec resolves and its model builds, or one line naming the spec as the user gave it."""
    from dpbench.workloads import check_model_builds, check_workload_specs

    if config.workloads:
        check_model_builds(named("workloads"), check_workload_specs(named("workloads"), config.workloads))


def _check(config: RunConfig, named: Callable[[str], str], *, device: str | None) -> None:
    """The settings the session's settings do not hold usable — the suites, the precision, the
    ``device`` they ask for, each strategy's options — or one line naming it as the user gave it
    (``named``: an option or the file's key)."""
    from dpbench.schema import PRECISIONS
    from dpbench.strategies import get_strategy

    where = f" (from {config.source})" if config.source else ""
    if config.suites:
        check_names(named("suites"), ",".join(config.suites), SUITES)
    if config.precision:
        check_choice(named("precision"), config.precision, PRECISIONS)
    # CUDA asked for by the option, the config file or DPBENCH_DEVICE (the settings say which).
    _check_device(device, named("device") if config.device else "DPBENCH_DEVICE")
    for name, options in _strategy_options(config).items():
        try:
            get_strategy(name).resolve_options(dict(options), device="cpu", world_size=2, global_batch=64)
        except Exception as exc:  # unknown names, bad values; "unavailable here" is the trial's to say
            if type(exc).__name__ != "StrategyUnavailable":
                raise ConfigError(f"strategy_options.{name}{where}: {exc}") from None


def _check_device(device: str | None, option: str) -> None:
    """CUDA asked for (by ``option``) where none is visible: refused here rather than by the suites
    after pytest has started."""
    if device != "cuda":
        return
    import torch

    # device_count() asks the driver without creating a CUDA context the workers would then lack.
    if not (torch.cuda.is_available() and torch.cuda.device_count()):
        raise ConfigError(
            f"{option}: expected cpu where no CUDA device is visible (torch {torch.__version__}), found 'cuda'"
        )


def _strategy_options(config: RunConfig) -> dict[str, dict]:
    from dpbench.schema import StrategyName

    options = {name: dict(opts) for name, opts in config.strategy_options.items()}
    if config.precision:
        for strategy in StrategyName:
            options.setdefault(strategy.value, {})["precision"] = config.precision
    return options


def pytest_command(plan: RunPlan, pytest_args: list[str], *, tables: bool = False) -> tuple[list[str], dict[str, str]]:
    """The pytest command line and environment that measure ``plan``: its settings as one JSON value
    (``--dpbench-settings``). ``dpbench run`` prints the decision itself, once, after the run is
    saved: the session's own copy of it is off, and so are pytest-benchmark's wide tables unless ``tables``."""
    config = plan.config
    suites = config.suites or (WORKLOAD_SUITES if config.workloads else SUITES)
    cmd = [sys.executable, "-m", "pytest", "--pyargs", *[f"dpbench.suites.test_{s}" for s in suites]]
    cmd += [f"--benchmark-storage=file://{Path(config.results).resolve()}", f"--benchmark-save={config.save}"]
    cmd += ["--benchmark-save-data", "-p", "no:cacheprovider", "-p", "no:dpbench-decision"]
    if not tables:
        cmd.append("--benchmark-quiet")
    cmd.append(f"--dpbench-settings={plan.settings.to_json()}")
    env = dict(os.environ)
    # The working directory's modules (my_models:…) import in pytest and in every worker.
    env["PYTHONPATH"] = os.pathsep.join([os.getcwd(), *filter(None, [env.get("PYTHONPATH")])])
    return cmd + [a for a in pytest_args if a != "--"], env


def _saved(results: Path, name: str) -> set[Path]:
    return set(results.glob(f"*/[0-9][0-9][0-9][0-9]_{name}.json"))


def nothing_saved_line(save: str, status: int, failed: list[Path]) -> str:
    """The last line of a run that saved nothing: where pytest says tests failed (exit 1), what failed
    (how many cases, the first one's line, from the failure files the session wrote,
    :mod:`dpbench.measure.plugin.failures`); else pytest's exit (an interrupted session says its own why)."""
    if not failed or status != TESTS_FAILED:
        return f"no run named {save} was saved (pytest exit {status}); no report"
    cases = f"{len(failed)} case{'s' if len(failed) != 1 else ''} failed"
    return f"{cases}, so no run named {save} was saved and no report (pytest exit {status}); the first: " + (
        first_failure_line(failed)
    )


def run(options: RunOptions, *, pytest_args: list[str], json_path: str | None = None, tables: bool = False) -> int:
    """Check, measure, save, report, decide; the exit code. ``json_path``: also write the decision
    as JSON there; ``tables``: pytest-benchmark's tables too."""
    from dpbench.workloads import SpecError

    try:
        plan = resolve_run(options, Path.cwd())
    except (ConfigError, SpecError, ValueError) as exc:
        print(f"dpbench run: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    config = plan.config
    cmd, env = pytest_command(plan, pytest_args, tables=tables)
    from dpbench.measure.profiles import world_sizes_line

    if line := world_sizes_line(plan.settings):  # what the configurations asked for will not measure
        print(f"dpbench run: {line}")
    if config.workloads and not config.suites:
        skipped = ", ".join(s for s in SUITES if s not in WORKLOAD_SUITES)
        print(
            "measuring the decision set: every strategy at its defaults at each world size (the throughput suite); "
            f"not run: {skipped} (--suites adds them)"
        )
    # From here on SIGTERM and SIGHUP stop the run as Ctrl-C does (the command line says which
    # signal and exits with the shell's status for it), the report included.
    with stop_signals():
        return _measure_and_report(plan, cmd, env, json_path=json_path)


def _run_pytest(cmd: list[str], env: dict[str, str]) -> int:
    """pytest's exit status. It ends with us: a stop is passed on to it and it is SIGKILLed after a
    grace period (:func:`dpbench._children.wait_stopping`); SIGKILLed ourselves, the kernel kills
    it (its workers then leave through its lifeline)."""
    proc = subprocess.Popen(cmd, env=env, preexec_fn=dies_with_us())
    with proc:
        return wait_stopping(proc)


def _measure_and_report(plan: RunPlan, cmd: list[str], env: dict[str, str], *, json_path: str | None) -> int:
    config = plan.config
    results = Path(config.results)
    # pytest-benchmark makes the results directory as it starts: a run that saves nothing
    # (interrupted, failed) leaves none behind.
    with no_empty_directories(results):
        before, failed_before = _saved(results, config.save), failure_files(results)
        status = _run_pytest(cmd, env)
        new = sorted(_saved(results, config.save) - before)
        failed = sorted(failure_files(results) - failed_before)
    if not new:
        print(f"dpbench run: {nothing_saved_line(config.save, status, failed)}", file=sys.stderr)
        return status or 1
    from dpbench.report.html import write_report_and_decision
    from dpbench.runner.text import print_decision

    report, decision = write_report_and_decision([str(new[-1])], config.report, results_dir=results)
    print(f"run saved: {new[-1]}")
    print_decision(decision=decision)
    if json_path:
        from dpbench.results.console import write_json

        write_json(json_path, decision.to_dict())
        print(f"decision as JSON: {Path(json_path).resolve()}")
    print(f"report: {report.resolve()}")
    return status
