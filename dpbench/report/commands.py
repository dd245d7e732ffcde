"""The ``dpbench report`` and ``dpbench compare`` subcommands (registered by dpbench.cli).

Parsers are built here without importing pandas or matplotlib; the handlers import them.
"""
from __future__ import annotations

import argparse
import json
import sys

__all__ = ["register_compare", "register_report"]

_RUNS_HELP = "a results .json file, a directory (its newest run per machine) or a saved-run id like 0001"


def _add_results_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", metavar="DIR", default="results",
                        help="pytest-benchmark storage that run ids refer to (default: results)")


def register_report(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "report", help="render saved runs into a self-contained HTML report",
        description="Render saved runs into one self-contained HTML file (plots, tables, provenance; "
                    "side-by-side ratios for two or more runs). Prints the report's path.")
    p.add_argument("runs", nargs="*", metavar="RUN",
                   help=f"{_RUNS_HELP}; default: the newest run of each machine in --results")
    p.add_argument("-o", "--output", default="report.html", metavar="FILE",
                   help="where to write the HTML (default: report.html)")
    p.add_argument("--title", default="dpbench report", help="the report's heading")
    _add_results_dir(p)
    p.set_defaults(handler=_run_report)


def _run_report(args: argparse.Namespace) -> int:
    from dpbench.report.html import write_report

    path = write_report(args.runs, args.output, results_dir=args.results, title=args.title)
    print(path.resolve())
    return 0


def register_compare(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "compare", help="regression gate: compare a candidate run against a baseline",
        description="Per benchmark, the ratio of median step times. A regression is a slowdown beyond "
                    "--threshold that is also significant (one-sided Mann-Whitney U on the raw rounds, "
                    "or non-overlapping median CIs without them). Exit 0: no regression; 1: regression; "
                    "2: unusable input.")
    p.add_argument("baseline", metavar="BASELINE", help=_RUNS_HELP)
    p.add_argument("candidate", metavar="CANDIDATE", help=_RUNS_HELP)
    p.add_argument("--threshold", default="5%", help="smallest slowdown that counts, e.g. 5%% or 0.05 (default 5%%)")
    p.add_argument("--alpha", type=float, default=0.05, help="significance level of the test (default 0.05)")
    p.add_argument("--aa", metavar="RUN", action="append", default=[],
                   help="another run of the baseline's code (A/A; repeatable): each benchmark's threshold "
                        "becomes at least the largest change between the baseline and these runs")
    p.add_argument("--markdown", metavar="FILE", help="also write a Markdown summary (for a PR comment)")
    p.add_argument("--json", metavar="FILE", help="also write the comparison as JSON")
    p.add_argument("--github-action-benchmark", metavar="FILE", dest="gab",
                   help="also write the candidate's numbers in github-action-benchmark's customSmallerIsBetter format")
    _add_results_dir(p)
    p.set_defaults(handler=_run_compare)


def _run_compare(args: argparse.Namespace) -> int:
    from dpbench._atomic import atomic_write_text
    from dpbench.report.compare import (compare_runs, parse_threshold, to_github_action_benchmark, to_json,
                                        to_markdown, to_text)

    cmp = compare_runs(args.baseline, args.candidate, threshold=parse_threshold(args.threshold),
                       alpha=args.alpha, results_dir=args.results, aa=args.aa)
    # Warnings first, before any number is read: a different GPU or torch explains a lot.
    for warning in cmp.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    sys.stderr.flush()
    if args.markdown:
        atomic_write_text(args.markdown, to_markdown(cmp))
    if args.json:
        atomic_write_text(args.json, json.dumps(to_json(cmp), indent=1) + "\n")
    if args.gab:
        atomic_write_text(args.gab, json.dumps(to_github_action_benchmark(cmp), indent=1) + "\n")
    sys.stdout.write(to_text(cmp))
    return cmp.exit_code
