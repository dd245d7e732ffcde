"""``dpbench runs``: the saved runs, machine by machine (:func:`dpbench.results.runs.summarise_runs`)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path

from dpbench.commands.options import ExamplesFormatter, add_no_color, add_results_dir, examples
from dpbench.results.console import colour_wanted, write_json
from dpbench.results.runs import format_runs, summarise_runs

__all__ = ["register_runs"]


def _run_runs(args: argparse.Namespace) -> int:
    runs = summarise_runs(args.results)
    if args.json:
        write_json(args.json, [asdict(r) for r in runs])
        if args.json == "-":
            return 0
    if not runs:
        where = Path(args.results)
        why = "does not exist" if not where.exists() else "holds no saved runs (<machine>/NNNN_NAME.json)"
        print(f"dpbench runs: {where}/ {why}; save one with `pytest suites/ --benchmark-save=NAME`", file=sys.stderr)
        return 0
    sys.stdout.write(format_runs(runs, colour=colour_wanted(sys.stdout, no_color=getattr(args, "no_color", False))))
    return 0


def register_runs(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "runs",
        help="list the saved runs per machine (date, commit, profile, benchmarks, trials, torch)",
        description="List every saved run under --results, machine by machine, oldest first; the first "
        "column is the id compare and report accept. An unreadable file is listed with why.",
        epilog=examples("dpbench runs", "dpbench runs --results ci-results/ --json - | jq '.[-1].run'"),
        formatter_class=ExamplesFormatter,
    )
    p.add_argument("--json", metavar="FILE", help="write the list as JSON (-: to stdout)")
    add_no_color(p)
    add_results_dir(p)
    p.set_defaults(handler=_run_runs)
