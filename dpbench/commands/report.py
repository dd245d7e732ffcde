"""The ``dpbench report`` subcommand (registered by dpbench.cli), and its forecast section's
options: ``--predict-world-sizes`` with the collective model's sources as ``dpbench predict RUN``
takes them (the model built by the same function, memory per rank by the same estimator).

The parser is built here without importing pandas or matplotlib; the handler imports them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from dpbench.commands.options import RUNS_HELP, ExamplesFormatter, add_results_dir, examples, int_list, positive_int
from dpbench.commands.predict import LINK_HELP
from dpbench.errors import UsageError

__all__ = ["register_report"]


def register_report(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "report",
        help="render saved runs into a self-contained HTML report",
        description="Render saved runs into one self-contained HTML file (plots, tables, provenance; "
        "side-by-side ratios for two or more runs). Prints the decision per workload, then the report's path.",
        epilog=examples(
            "dpbench report",
            "dpbench report 0003 0004 -o compare.html --title 'ddp vs fsdp'",
            "dpbench report 0003 --predict-world-sizes 8,16 --gpus-per-node 8 --link inter=25GB/s",
        ),
        formatter_class=ExamplesFormatter,
    )
    p.add_argument(
        "runs", nargs="*", metavar="RUN", help=f"{RUNS_HELP}; default: the newest run of each machine in --results"
    )
    p.add_argument(
        "-o",
        "--output",
        default="report.html",
        metavar="FILE",
        help="the HTML file to write (default: report.html; not a directory)",
    )
    p.add_argument("--title", default="dpbench report", help="the report's heading")
    p.add_argument(
        "--json",
        metavar="FILE",
        help="also write the decision (every question's answer and claims) as JSON to FILE, or - for stdout",
    )
    add_results_dir(p)
    forecast = p.add_argument_group(
        "forecast at other world sizes",
        "a section with each run's step predicted as dpbench predict RUN predicts it (memory per rank: the "
        "state estimate)",
    )
    forecast.add_argument(
        "--predict-world-sizes",
        metavar="LIST",
        help="comma-separated world sizes to predict every ddp, fsdp, zero and allreduce configuration at",
    )
    forecast.add_argument(
        "--collectives",
        nargs="+",
        metavar="FILE",
        help="the collective measurements to predict with (nccl-tests logs, comm-suite runs; default: each run's own)",
    )
    forecast.add_argument(
        "--collective",
        metavar="NAME",
        help="the collective of logs in --collectives whose header and file name do not say (all_reduce, ...)",
    )
    forecast.add_argument("--link", metavar="SPEC", help=LINK_HELP)
    forecast.add_argument(
        "--gpus-per-node",
        type=positive_int,
        metavar="G",
        help="GPUs per node (default: the most ranks on one node measured)",
    )
    forecast.add_argument(
        "--scaling",
        choices=("weak", "strong"),
        help="weak keeps the per-rank batch, strong the global batch (default: weak)",
    )
    p.set_defaults(handler=_run_report)


# The options that only shape the forecast, as the user types them, and their namespace names.
_FORECAST_OPTIONS = (
    ("--collectives", "collectives"),
    ("--collective", "collective"),
    ("--link", "link"),
    ("--gpus-per-node", "gpus_per_node"),
    ("--scaling", "scaling"),
)


def _forecaster(args: argparse.Namespace) -> Callable[[Sequence[Any]], list[Any]] | None:
    """The runs read → each one's forecast (None for a run with no case to predict from), or None
    when no forecast was asked for; the options checked here, before any run is read."""
    if args.predict_world_sizes is None:
        given = [option for option, name in _FORECAST_OPTIONS if getattr(args, name) is not None]
        if given:
            raise UsageError(
                f"{given[0]}: expected --predict-world-sizes LIST beside it (the world sizes to predict), found none"
            )
        return None
    worlds = int_list(args.predict_world_sizes, "--predict-world-sizes")

    def forecasts(runs: Sequence[Any]) -> list[Any]:
        from dpbench.commands.predict import MEMORY_KINDS, memory_estimator
        from dpbench.predict import profiles_from_run, run_collective_model, step_predictions

        memory = memory_estimator("state")  # one estimator: each workload's model is built once
        out: list[Any] = []
        first_refusal: UsageError | None = None
        for run in runs:
            try:
                profiles_from_run(run)
            except UsageError as exc:  # no case to predict from: the section says so for this run
                first_refusal = first_refusal or exc
                out.append(None)
                continue
            model = run_collective_model(
                run,
                collectives=args.collectives,
                link=args.link,
                gpus_per_node=args.gpus_per_node,
                collective=args.collective,
            )
            out.append(
                step_predictions(
                    run,
                    model,
                    worlds,
                    scaling=args.scaling or "weak",
                    memory=memory,
                    memory_kind=MEMORY_KINDS["state"],
                )
            )
        if first_refusal is not None and all(f is None for f in out):
            raise first_refusal
        return out

    return forecasts


def _run_report(args: argparse.Namespace) -> int:
    from dpbench.report.html import write_report_and_decision
    from dpbench.report.text import decision_text
    from dpbench.results.console import write_json

    path, decision = write_report_and_decision(
        args.runs, args.output, results_dir=args.results, title=args.title, predict=_forecaster(args)
    )
    if args.json == "-":  # stdout holds the JSON alone, for a pipe
        write_json("-", decision.to_dict())
        return 0
    if args.json:
        write_json(args.json, decision.to_dict())
    # The decision in words first (the same object as the page's decision view), the page's path last.
    sys.stdout.write(decision_text(decision=decision))
    print(path.resolve())
    return 0
