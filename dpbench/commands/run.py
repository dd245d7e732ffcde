"""``dpbench run``: the subcommand's shape — its options, help and examples — handed to
:func:`dpbench.runner.run.run` as keyword arguments, once. What it does (the config file, the
checks, pytest, the report) is :mod:`dpbench.runner`.
"""

from __future__ import annotations

import argparse

from dpbench.commands.options import ExamplesFormatter, examples, positive_int
from dpbench.decision.sequential import fewest_max_trials
from dpbench.measure.settings import DEFAULT_MAX_TRIALS
from dpbench.runner.config import SUITES
from dpbench.runner.run import DEFAULT_BUDGET, RunOptions

__all__ = ["register_run", "run_options"]


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
        help=f"until settled: the most trials a case gets (default {DEFAULT_MAX_TRIALS}; "
        f"at least {fewest_max_trials()[0]})",
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
    p.set_defaults(handler=_run)


def run_options(args: argparse.Namespace) -> RunOptions:
    """The command line's values, as the runner takes them."""
    return RunOptions(
        workloads=tuple(args.workload or ()),
        **{
            key: getattr(args, key)
            for key in (
                "strategies",
                "world_sizes",
                "suites",
                "trials",
                "until_settled",
                "max_trials",
                "budget",
                "profile",
                "device",
                "precision",
                "save",
                "results",
                "report",
                "config",
            )
        },
    )


def _run(args: argparse.Namespace) -> int:
    from dpbench.runner.run import run

    return run(run_options(args), pytest_args=list(args.pytest_args or []), json_path=args.json, tables=args.tables)
