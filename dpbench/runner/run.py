"""``dpbench run``: the packaged suites (``pytest --pyargs dpbench.suites``, with dpbench's measuring
plugin) on the workloads, strategies and world sizes asked for, then the saved run, the HTML report
and the decision in the terminal.

Everything asked for is checked before any process starts — each workload spec resolves, each
strategy and its options exist, the config file is valid — and a problem is one line and exit 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from dpbench._atomic import no_empty_directories
from dpbench.commands.options import ExamplesFormatter, check_choice, check_names, examples, positive_int
from dpbench.runner.config import (
    SUITES,
    WORKLOAD_SUITES,
    ConfigError,
    RunConfig,
    find_config,
    load_config,
    read_config,
)

__all__ = ["register_run", "resolve_run_config", "pytest_command", "run"]

EXIT_INPUT = 2
DEFAULT_BUDGET = "30m"
"""Until settled, the wall-clock budget when none is given."""
DEFAULT_MAX_TRIALS = 12
"""Until settled, the most trials a case gets when no maximum is given (the sequential design's
default, :data:`dpbench.decision.sequential.DEFAULT_MAX_TRIALS`: a test pins that they agree)."""


def register_run(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "run",
        help="run the benchmark suites on your workloads, save the run, write the report, print the decision",
        description="Measure every strategy on the workloads named (registered names, MODULE:ATTR, "
        "path/to/file.py:ATTR, hf:MODEL_TYPE, hf:PATH, with @key=value overrides) through the packaged "
        "suites, save the run, write the HTML report and print the decision per workload. Settings come "
        "from [tool.dpbench] in ./pyproject.toml or ./dpbench.toml, then these options. Arguments after "
        "-- go to pytest.",
        epilog=examples(
            "dpbench run --workload mlp --strategies single,ddp --world-sizes 1,2",
            "dpbench run --workload my_models:tiny_net --workload hf:gpt2@n_layer=2,n_embd=64 --budget 10m",
            "dpbench run --workload mlp --trials 8    # a fixed number of trials per case",
            "dpbench run --profile quick -- -k 'ddp and mlp'",
        ),
        formatter_class=ExamplesFormatter,
    )
    p.add_argument("--workload", action="append", metavar="SPEC", help="a workload spec (repeatable)")
    p.add_argument(
        "--strategies",
        metavar="LIST",
        help="comma-separated strategies, each maybe a configuration: ddp@bucket_cap_mb=100 (default: all)",
    )
    p.add_argument("--world-sizes", metavar="LIST", help="comma-separated world sizes, e.g. 1,2")
    p.add_argument("--profile", choices=("quick", "full"), help="quick (CPU-sized) or full (default by device)")
    p.add_argument(
        "--trials",
        type=positive_int,
        metavar="N",
        help="a fixed number of fresh-process trials per case (default: trials until settled)",
    )
    p.add_argument(
        "--until-settled",
        action="store_true",
        default=None,
        help="trials until the answer is settled (the default): after the fewest a claim needs, only the "
        "cases whose comparisons are still open get more, up to --max-trials, within --budget",
    )
    p.add_argument(
        "--max-trials",
        metavar="N",
        help=f"until settled: the most trials a case gets (default {DEFAULT_MAX_TRIALS}; at least 5)",
    )
    p.add_argument(
        "--budget",
        metavar="TIME",
        help=f"until settled: start no trial pass that would end past this wall-clock time, e.g. 90s, 10m, 1h "
        f"(default {DEFAULT_BUDGET})",
    )
    p.add_argument("--device", choices=("cpu", "cuda"), help="where the workers train (default: cuda if visible)")
    p.add_argument("--precision", metavar="P", help="every strategy's precision option (fp32, bf16, fp16)")
    p.add_argument("--suites", metavar="LIST", help=f"comma-separated suites from {', '.join(SUITES)}")
    p.add_argument("--save", metavar="NAME", help="the saved run's name (default: run)")
    p.add_argument("--results", metavar="DIR", help="the results directory (default: results)")
    p.add_argument("--report", metavar="FILE", help="the HTML report to write (default: report.html)")
    p.add_argument("--config", metavar="FILE", help="a config file instead of ./dpbench.toml or ./pyproject.toml")
    p.add_argument(
        "--json", metavar="FILE", help="also write the decision (every question's answer and claims) as JSON to FILE"
    )
    p.add_argument(
        "--tables",
        action="store_true",
        help="also print pytest-benchmark's per-benchmark tables (wide; the report has every number)",
    )
    p.add_argument("pytest_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    p.set_defaults(handler=run)


def _list(option: str, raw: str | None) -> tuple[str, ...] | None:
    if raw is None:
        return None
    items = tuple(v.strip() for v in raw.split(",") if v.strip())
    if not items:
        raise ConfigError(f"{option}: expected a comma-separated list, found {raw!r}")
    return items


def resolve_run_config(args: argparse.Namespace, cwd: Path) -> RunConfig:
    """The config file's settings with the command line's on top, every part checked."""
    if args.config:
        path = Path(args.config)
        if not path.is_file():
            raise ConfigError(f"--config: expected a config file, found no file {args.config}")
        found = read_config(path)
    else:
        found = find_config(cwd)
    config = load_config(*found) if found else RunConfig()
    changes: dict = {}
    if args.workload:
        changes["workloads"] = tuple(args.workload)
    if args.strategies:  # configurations: "single,ddp@bucket_cap_mb=100,static_graph=true"
        from dpbench.workloads.spec_syntax import split_specs

        changes["strategies"] = split_specs(args.strategies) or _list("--strategies", args.strategies)
    if args.world_sizes:
        sizes = _list("--world-sizes", args.world_sizes)
        if not all(s.isdigit() and int(s) >= 1 for s in sizes):
            raise ConfigError(f"--world-sizes: expected comma-separated ints >= 1, found {args.world_sizes!r}")
        changes["world_sizes"] = tuple(int(s) for s in sizes)
    if args.suites:
        changes["suites"] = _list("--suites", args.suites)
    changes.update(_design(args))
    for key in ("profile", "device", "precision", "save", "results", "report"):
        if getattr(args, key) is not None:
            changes[key] = getattr(args, key)
    config = dataclasses.replace(config, **changes)
    options = {"workloads": "--workload"}  # the others are their key's option
    _check(
        config, lambda key: options.get(key, f"--{key.replace('_', '-')}") if key in changes else _file_key(config, key)
    )
    return config


def _design(args: argparse.Namespace) -> dict:
    """The command line's trial design, over the config file's: ``--trials N`` a fixed design;
    ``--until-settled`` (with ``--max-trials``, ``--budget``) trials until settled. Both: refused."""
    settled = {"--until-settled": args.until_settled, "--max-trials": args.max_trials, "--budget": args.budget}
    given = [option for option, value in settled.items() if value]
    if args.trials is not None and given:
        raise ConfigError(
            f"{given[0]}: trials until the answer is settled, found with --trials {args.trials} "
            "(a fixed number of trials per case): choose one"
        )
    if args.trials is not None:
        return {"trials": args.trials, "until_settled": False, "max_trials": None, "budget": None}
    if not given:
        return {}
    changes: dict = {"until_settled": True, "trials": None}
    if args.max_trials is not None:
        from dpbench.measure.settle import parse_max_trials

        changes["max_trials"] = parse_max_trials("--max-trials", args.max_trials)
    if args.budget is not None:
        changes["budget"] = args.budget
    return changes


def _file_key(config: RunConfig, key: str) -> str:
    """How an error names a setting the config file gave: the file, then the key as written there."""
    if config.source is None:
        return key
    prefix = "tool.dpbench." if Path(config.source).name == "pyproject.toml" else ""
    return f"{config.source}: {prefix}{key}"


def _check(config: RunConfig, named: Callable[[str], str]) -> None:
    """Every setting usable, or one line naming it as the user gave it (``named``: an option or the file's key)."""
    from dpbench.strategies import get_strategy
    from dpbench.strategies.memory import PRECISIONS
    from dpbench.workloads import check_model_builds, check_workload_specs

    where = f" (from {config.source})" if config.source else ""
    if config.workloads:
        check_model_builds(named("workloads"), check_workload_specs(named("workloads"), config.workloads))
    if config.strategies:
        from dpbench.strategies.configs import parse_configs

        try:
            sizes = config.world_sizes or (2,)
            parse_configs(named("strategies"), config.strategies, world_size=max(sizes))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    if config.suites:
        check_names(named("suites"), ",".join(config.suites), SUITES)
    if config.precision:
        check_choice(named("precision"), config.precision, PRECISIONS)
    _check_design(config, named)
    _check_device(config.device, named("device"))
    for name, options in _strategy_options(config).items():
        try:
            get_strategy(name).resolve_options(dict(options), device="cpu", world_size=2, global_batch=64)
        except Exception as exc:  # unknown names, bad values; "unavailable here" is the trial's to say
            if type(exc).__name__ != "StrategyUnavailable":
                raise ConfigError(f"strategy_options.{name}{where}: {exc}") from None


def _check_design(config: RunConfig, named: Callable[[str], str]) -> None:
    """A fixed design and trials until settled are not both asked for; a budget and a maximum parse."""
    from dpbench.measure.settle import parse_budget, parse_max_trials

    if config.trials is not None:
        for key in ("until_settled", "max_trials", "budget"):
            if getattr(config, key):
                raise ConfigError(
                    f"{named(key)}: trials until the answer is settled, found with {named('trials')} = "
                    f"{config.trials} (a fixed number of trials per case): choose one"
                )
    if config.budget is not None:
        parse_budget(named("budget"), config.budget)
    if config.max_trials is not None:
        parse_max_trials(named("max_trials"), config.max_trials)


def _check_device(device: str | None, option: str) -> None:
    """CUDA asked for (by the option, the config file or ``DPBENCH_DEVICE``) where none is visible:
    refused here rather than by the suites after pytest has started."""
    if device is None and os.environ.get("DPBENCH_DEVICE") == "cuda":
        device, option = "cuda", "DPBENCH_DEVICE"
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


def pytest_command(
    config: RunConfig, pytest_args: list[str], *, tables: bool = False
) -> tuple[list[str], dict[str, str]]:
    """The pytest command line and environment that measure ``config``. ``dpbench run`` prints the
    decision itself, once, after the run is saved: the session's own copy of it is off, and so are
    pytest-benchmark's wide tables unless ``tables``."""
    suites = config.suites or (WORKLOAD_SUITES if config.workloads else SUITES)
    cmd = [sys.executable, "-m", "pytest", "--pyargs", *[f"dpbench.suites.test_{s}" for s in suites]]
    cmd += [f"--benchmark-storage=file://{Path(config.results).resolve()}", f"--benchmark-save={config.save}"]
    cmd += ["--benchmark-save-data", "-p", "no:cacheprovider", "-p", "no:dpbench-decision"]
    if not tables:
        cmd.append("--benchmark-quiet")
    for spec in config.workloads:
        cmd += ["--dpbench-workload", spec]
    if config.strategies:
        cmd += ["--dpbench-strategies", ",".join(config.strategies)]
    if config.trials:
        cmd += ["--dpbench-trials", str(config.trials)]
    elif config.until_settled is not False:  # the default: trials until the answer is settled
        cmd += ["--dpbench-until-settled", "--dpbench-max-trials", str(config.max_trials or DEFAULT_MAX_TRIALS)]
        cmd += ["--dpbench-budget", config.budget or DEFAULT_BUDGET]
    env = dict(os.environ)
    # The working directory's modules (my_models:…) import in pytest and in every worker.
    env["PYTHONPATH"] = os.pathsep.join([os.getcwd(), *filter(None, [env.get("PYTHONPATH")])])
    for key, value in (("DPBENCH_PROFILE", config.profile), ("DPBENCH_DEVICE", config.device)):
        if value:
            env[key] = value
    if config.world_sizes:
        env["DPBENCH_WORLD_SIZES"] = ",".join(map(str, config.world_sizes))
    options = _strategy_options(config)
    if options:
        env["DPBENCH_STRATEGY_OPTIONS"] = json.dumps(options)
    env["DPBENCH_RUN_CONFIG"] = json.dumps(config.to_dict())  # saved with the run (machine_info)
    return cmd + [a for a in pytest_args if a != "--"], env


def _say_slow_steps(config: RunConfig) -> None:
    """Before the trials: a line for each workload whose single step on this CPU is estimated to
    take long (what dominates it, how to shrink it). On a GPU the CPU's estimate says nothing."""
    if not config.workloads or config.device == "cuda" or os.environ.get("DPBENCH_DEVICE") == "cuda":
        return
    import torch

    if config.device is None and torch.cuda.is_available() and torch.cuda.device_count():
        return
    from dpbench.measure.profiles import resolve_profile
    from dpbench.strategies.step_cost import slow_step_line, step_cost
    from dpbench.workloads import resolve_workload

    profile = resolve_profile(config.profile, cuda_count=0)
    rate = None  # measured with the first workload's count, then kept for the others
    for spec in config.workloads:
        batch = profile.global_batch_for(spec)
        cost = step_cost(resolve_workload(spec), batch, rate=rate)
        rate = cost.rate if cost is not None else rate
        line = cost and slow_step_line(spec, cost, batch)
        if line:
            print(f"dpbench run: {line}")


def _saved(results: Path, name: str) -> set[Path]:
    return set(results.glob(f"*/[0-9][0-9][0-9][0-9]_{name}.json"))


def run(args: argparse.Namespace) -> int:
    """The handler: check, measure, save, report, decide."""
    from dpbench.workloads import SpecError

    try:
        config = resolve_run_config(args, Path.cwd())
    except (ConfigError, SpecError, ValueError) as exc:
        print(f"dpbench run: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    cmd, env = pytest_command(config, list(args.pytest_args or []), tables=getattr(args, "tables", False))
    _say_slow_steps(config)
    if config.workloads and not config.suites:
        skipped = ", ".join(s for s in SUITES if s not in WORKLOAD_SUITES)
        print(
            "measuring the decision set: every strategy at its defaults at each world size (the throughput suite); "
            f"not run: {skipped} (--suites adds them)"
        )
    results = Path(config.results)
    # pytest-benchmark makes the results directory as it starts: a run that saves nothing
    # (interrupted, failed) leaves none behind.
    with no_empty_directories(results):
        before = _saved(results, config.save)
        status = subprocess.run(cmd, env=env).returncode
        new = sorted(_saved(results, config.save) - before)
    if not new:
        print(f"dpbench run: no run named {config.save} was saved (pytest exit {status}); no report", file=sys.stderr)
        return status or 1
    from dpbench.report.html import write_report_and_decision
    from dpbench.runner.summary import print_decision

    report, decision = write_report_and_decision([str(new[-1])], config.report, results_dir=results)
    print(f"run saved: {new[-1]}")
    print_decision(decision=decision)
    if getattr(args, "json", None):
        from dpbench.results.console import write_json

        write_json(args.json, decision.to_dict())
        print(f"decision as JSON: {Path(args.json).resolve()}")
    print(f"report: {report.resolve()}")
    return status
