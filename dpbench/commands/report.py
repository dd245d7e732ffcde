"""The ``dpbench report`` subcommand (registered by dpbench.cli).

The parser is built here without importing pandas or matplotlib; the handler imports them.
"""

from __future__ import annotations

import argparse
import sys

from dpbench.commands.options import RUNS_HELP, ExamplesFormatter, add_results_dir, examples

__all__ = ["register_report"]


def register_report(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "report",
        help="render saved runs into a self-contained HTML report",
        description="Render saved runs into one self-contained HTML file (plots, tables, provenance; "
        "side-by-side ratios for two or more runs). Prints the decision per workload, then the report's path.",
        epilog=examples("dpbench report", "dpbench report 0003 0004 -o compare.html --title 'ddp vs fsdp'"),
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
    p.set_defaults(handler=_run_report)


def _run_report(args: argparse.Namespace) -> int:
    from dpbench.report.html import write_report_and_decision
    from dpbench.report.session_summary import decision_text
    from dpbench.results.console import write_json

    path, decision = write_report_and_decision(args.runs, args.output, results_dir=args.results, title=args.title)
    if args.json == "-":  # stdout holds the JSON alone, for a pipe
        write_json("-", decision.to_dict())
        return 0
    if args.json:
        write_json(args.json, decision.to_dict())
    # The decision in words first (the same object as the page's decision view), the page's path last.
    sys.stdout.write(decision_text(decision=decision))
    print(path.resolve())
    return 0
