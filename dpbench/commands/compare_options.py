"""``dpbench compare``'s options for the terminal view (``--all``, ``--sort``, ``-k``, ``--columns``,
``--fail-on-inconclusive``, ``--no-color``) and the warning for a run compared with itself."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TextIO

__all__ = ["add_text_arguments", "check_same_runs", "text_options"]


def add_text_arguments(p: argparse.ArgumentParser) -> None:
    from dpbench.gate.compare_text import COLUMNS, DEFAULT_COLUMNS, SORTS
    from dpbench.results.console import add_no_color

    p.add_argument("--all", action="store_true", dest="show_all", help="list every benchmark, the unchanged too")
    p.add_argument(
        "--sort",
        default="verdict",
        metavar="KEY",
        help=f"row order: {', '.join(SORTS)} (default: verdict — regressed first, then by change)",
    )
    p.add_argument(
        "-k", dest="keyword", default="", metavar="EXPR", help="list only the benchmarks EXPR selects, as pytest's -k"
    )
    p.add_argument(
        "--columns",
        default=",".join(DEFAULT_COLUMNS),
        metavar="LIST",
        help=f"comma-separated, from {', '.join(COLUMNS)} (default: {','.join(DEFAULT_COLUMNS)})",
    )
    p.add_argument(
        "--fail-on-inconclusive",
        action="store_true",
        help="exit 1 when a case is inconclusive (not enough evidence either way), not only on a regression",
    )
    add_no_color(p)


def text_options(args: argparse.Namespace, stream: TextIO):
    """The :class:`~dpbench.gate.compare_text.TextOptions` the arguments ask for, printing to ``stream``."""
    from dpbench.gate.compare_text import SORTS, TextOptions, parse_columns
    from dpbench.results.console import colour_wanted, did_you_mean, terminal_width
    from dpbench.results.load import ResultsError

    if args.sort not in SORTS:
        raise ResultsError(
            f"--sort: expected one of {', '.join(SORTS)}, found {args.sort!r}{did_you_mean(args.sort, SORTS)}"
        )
    from dpbench.gate.keyword import keyword_matcher

    keyword_matcher(args.keyword)  # a malformed -k is bad input before anything is loaded
    return TextOptions(
        show_all=args.show_all,
        sort=args.sort,
        keyword=args.keyword,
        columns=parse_columns(args.columns),
        width=terminal_width(stream),
        colour=colour_wanted(stream, no_color=getattr(args, "no_color", False)),
        fail_on_inconclusive=args.fail_on_inconclusive,
    )


def check_same_runs(baseline: Sequence[str], candidate: Sequence[str], results_dir: str) -> list[str]:
    """A warning when a run sits on both sides: every case then compares with itself."""
    from dpbench.results.load import resolve_run

    base = {resolve_run(spec, results_dir=results_dir).resolve() for spec in baseline}
    same = [str(p) for p in (resolve_run(s, results_dir=results_dir).resolve() for s in candidate) if p in base]
    if not same:
        return []
    return [
        f"the baseline and the candidate share {', '.join(same)}: its cases are compared with themselves, "
        "so the comparison shows nothing about a change"
    ]
