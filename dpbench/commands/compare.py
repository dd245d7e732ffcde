"""The ``dpbench compare`` subcommand (registered by dpbench.cli, run by dpbench ab).

Parsers are built here without importing pandas or matplotlib; the handler imports them.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from dpbench.commands.options import (
    RUN_HELP,
    ExamplesFormatter,
    SuggestingParser,
    add_no_color,
    add_results_dir,
    examples,
)
from dpbench.errors import UsageError, did_you_mean
from dpbench.results.load import MACHINE_FIELDS

__all__ = [
    "add_compare_arguments",
    "add_text_arguments",
    "check_same_runs",
    "compare_parser",
    "register_compare",
    "run_compare",
    "text_options",
]


def register_compare(subparsers: argparse._SubParsersAction) -> None:
    add_compare_arguments(
        subparsers.add_parser(
            "compare", help="regression gate: compare candidate runs against baseline runs", **_COMPARE_PARSER
        )
    )


def compare_parser() -> argparse.ArgumentParser:
    """The compare command's own parser (``dpbench ab`` parses its compare options with it)."""
    parser = SuggestingParser(prog="dpbench compare", **_COMPARE_PARSER)
    add_compare_arguments(parser)
    return parser


_COMPARE_PARSER = dict(
    usage="dpbench compare BASELINE CANDIDATE [options]\n"
    "       dpbench compare --baseline RUN [RUN ...] --candidate RUN [RUN ...] [options]",
    description="Per benchmark, the ratio of the median trial times (a trial = fresh worker processes; "
    "a side's trials are pooled over its runs). Regressed = slower than the machine's shift (the "
    "other benchmarks' median move, or the controls') by more than --threshold, and significant "
    "against no change after Holm's correction over the distinct cases. The test is one-sided on "
    "log trial times, its variance each case's own moderated by a log-normal prior over the "
    "cases (its centre following the step time), plus how far a fresh session moves a case "
    "(log-normal across cases, fitted from the comparison itself, or per case from --aa runs). Fewer than 2 "
    "trials a side, "
    "or slower but not significant, is inconclusive. Exit 0: no regression; 1: a regression, "
    "or benchmarks missing from the candidate (see --allow-missing), or with --fail-on-inconclusive an "
    "inconclusive case; 2: unusable input. The first line printed is the verdict; then only the rows "
    "that are not unchanged (--all: every row), each inconclusive one with the cheapest next step.",
    epilog=examples(
        "dpbench compare 0001 0002",
        "dpbench compare main.json head.json -k 'ddp and not w1' --fail-on-inconclusive",
        "dpbench compare 0001 0002 --all --sort change --columns benchmark,change,p,verdict",
        "dpbench compare 0001 0002 --json - | jq .counts",
    ),
    formatter_class=ExamplesFormatter,
)


def add_compare_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="*", metavar="RUN", help=f"BASELINE and CANDIDATE, each {RUN_HELP}")
    p.add_argument(
        "--baseline",
        nargs="+",
        metavar="RUN",
        dest="baseline_runs",
        help="the baseline's runs (several: their trials are pooled)",
    )
    p.add_argument(
        "--candidate",
        nargs="+",
        metavar="RUN",
        dest="candidate_runs",
        help="the candidate's runs (several: their trials are pooled)",
    )
    p.add_argument("--threshold", default="10%", help="smallest slowdown that counts, e.g. 10%% or 0.1 (default 10%%)")
    p.add_argument(
        "--alpha",
        default="0.01",
        help="family-wise significance level, in (0, 0.5] (default 0.01): the chance that a job "
        "with no regression fails",
    )
    p.add_argument(
        "--paired",
        action="store_true",
        help="run i of the baseline ran next to run i of the candidate (dpbench ab passes this): "
        "test the log ratios of those pairs",
    )
    p.add_argument(
        "--differ-in",
        default="",
        metavar="FIELDS",
        help="machine fields the sides are meant to differ in, comma-separated (of "
        f"{', '.join(MACHINE_FIELDS)}): no 'machines differ' warning for them (dpbench ab passes "
        "torch,cuda,driver: what an environment A/B compares)",
    )
    p.add_argument(
        "--allow-missing",
        action="store_true",
        help="benchmarks in the baseline but not in the candidate are listed, not failed",
    )
    p.add_argument(
        "--aa",
        metavar="RUN",
        action="append",
        default=[],
        help="another run of the baseline's code on its machine (A/A; repeatable): the between-run "
        "spread the test allows is at least what these runs show, overall and per benchmark",
    )
    p.add_argument(
        "--history",
        metavar="RUN|DIR",
        action="append",
        default=[],
        help="saved runs of the baseline's machine over commits (as for dpbench history; repeatable): "
        "a benchmark with an accepted change newer than the baseline's commit is judged against "
        "the level after that change, not against the baseline's own trials",
    )
    p.add_argument(
        "--accepted",
        metavar="FILE",
        help="the accepted changes, with --history (default: results/accepted.toml; absent = none)",
    )
    add_text_arguments(p)
    p.add_argument("--markdown", metavar="FILE", help="also write a Markdown summary (for a PR comment)")
    p.add_argument(
        "--json", metavar="FILE", help="also write the comparison as JSON (-: to stdout, the text then to stderr)"
    )
    p.add_argument(
        "--github-action-benchmark",
        metavar="FILE",
        dest="gab",
        help="also write the candidate's numbers in github-action-benchmark's customSmallerIsBetter format",
    )
    add_results_dir(p)
    p.set_defaults(handler=run_compare)


def _sides(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """Either ``BASELINE CANDIDATE`` or ``--baseline RUN... --candidate RUN...``, never a mix."""
    from dpbench.results.load import resolve_run

    flags = args.baseline_runs is not None or args.candidate_runs is not None
    if flags and not args.runs and args.baseline_runs and args.candidate_runs:
        return args.baseline_runs, args.candidate_runs
    if not flags and len(args.runs) == 2:
        return [args.runs[0]], [args.runs[1]]
    # A run that does not exist is the likelier mistake (`dpbench compare 0009`): say that first.
    for spec in [*args.runs, *(args.baseline_runs or []), *(args.candidate_runs or [])]:
        resolve_run(spec, results_dir=args.results)
    found = (
        f"{len(args.runs)} positional run(s)"
        + (", --baseline" if args.baseline_runs else "")
        + (", --candidate" if args.candidate_runs else "")
    )
    raise UsageError(
        f"expected BASELINE CANDIDATE, or --baseline RUN [RUN ...] --candidate RUN [RUN ...]; found {found}"
    )


def _accepted_levels(args: argparse.Namespace):
    """``--history``/``--accepted``: the function compare_runs calls with the baseline's frame."""

    if not args.history:
        if args.accepted is not None:
            raise UsageError("--accepted: only with --history (the accepted changes are found in a history)")
        return None
    from dpbench.gate.judge import Pooled
    from dpbench.history.accepted import ACCEPTED_FILE, read_accepted
    from dpbench.history.series import accepted_levels, load_history, run_files

    if args.accepted is not None and not Path(args.accepted).is_file():
        raise UsageError(f"--accepted: {args.accepted} is not a file")
    accepted = read_accepted(args.accepted if args.accepted is not None else ACCEPTED_FILE)
    history = load_history(run_files(args.history, args.results), accepted=accepted)
    for path, error in history.skipped:
        print(f"warning: --history: skipped {path}: {error}", file=sys.stderr)

    def levels(baseline):
        found, said = accepted_levels(history, baseline)
        return {
            name: (
                Pooled(unit=level.unit, runs=level.runs, control_runs=level.control_runs, case_key=level.case_key),
                note,
            )
            for name, (level, note) in found.items()
        }, said

    return levels


def _differ_in(raw: str) -> tuple[str, ...]:

    fields = tuple(f.strip() for f in raw.split(",") if f.strip())
    unknown = [f for f in fields if f not in MACHINE_FIELDS]
    if unknown:
        close = did_you_mean(unknown[0], MACHINE_FIELDS)
        raise UsageError(f"--differ-in: expected fields of {', '.join(MACHINE_FIELDS)}, found {unknown[0]!r}{close}")
    return fields


def run_compare(args: argparse.Namespace) -> int:
    """Judge, print the verdicts, write the optional files; the exit code (0, 1)."""
    from dpbench._atomic import atomic_write_text
    from dpbench.gate.compare import check_alpha, compare_runs, parse_threshold
    from dpbench.gate.formats import to_github_action_benchmark, to_json, to_markdown
    from dpbench.gate.text import exit_code, render
    from dpbench.gate.verdicts import WarningKind
    from dpbench.results.console import write_json
    from dpbench.results.load import resolve_run

    threshold = parse_threshold(args.threshold)
    try:
        alpha = float(args.alpha)
    except ValueError:
        raise UsageError(f"--alpha: expected a probability in (0, 0.5], found {args.alpha!r}") from None
    check_alpha(alpha)
    differ_in = _differ_in(args.differ_in)
    baseline, candidate = _sides(args)
    options = text_options(args, sys.stderr if args.json == "-" else sys.stdout)
    levels = _accepted_levels(args)
    # Each run named once, here: the gate and the same-run check take the files it names.
    baseline = [resolve_run(spec, results_dir=args.results) for spec in baseline]
    candidate = [resolve_run(spec, results_dir=args.results) for spec in candidate]
    cmp = compare_runs(
        baseline,
        candidate,
        threshold=threshold,
        alpha=alpha,
        results_dir=args.results,
        aa=args.aa,
        allow_missing=args.allow_missing,
        paired=args.paired,
        baseline_levels=levels,
    )
    # Warnings first, before any number is read: a different GPU or torch explains a lot.
    cmp.warnings = [w for w in cmp.warnings if not (w.kind is WarningKind.MACHINES and w.field in differ_in)]
    for warning in check_same_runs(baseline, candidate) + cmp.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    sys.stderr.flush()
    if args.markdown:
        atomic_write_text(args.markdown, to_markdown(cmp))
    if args.json:
        write_json(args.json, to_json(cmp, next_steps=True))
    if args.gab:
        atomic_write_text(args.gab, json.dumps(to_github_action_benchmark(cmp), indent=1) + "\n")
    (sys.stderr if args.json == "-" else sys.stdout).write(render(cmp, options))
    return exit_code(cmp, fail_on_inconclusive=options.fail_on_inconclusive)


# ``dpbench compare``'s options for the terminal view (``--all``, ``--sort``, ``-k``, ``--columns``,
# ``--fail-on-inconclusive``, ``--no-color``) and the warning for a run compared with itself.
def add_text_arguments(p: argparse.ArgumentParser) -> None:
    from dpbench.gate.text import COLUMNS, DEFAULT_COLUMNS, SORTS

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
    """The :class:`~dpbench.gate.text.TextOptions` the arguments ask for, printing to ``stream``."""
    from dpbench.gate.text import TextOptions, keyword_matcher, parse_columns, parse_sort
    from dpbench.results.console import colour_wanted, terminal_width

    sort = parse_sort(args.sort)
    keyword_matcher(args.keyword)  # a malformed -k is bad input before anything is loaded
    return TextOptions(
        show_all=args.show_all,
        sort=sort,
        keyword=args.keyword,
        columns=parse_columns(args.columns),
        width=terminal_width(stream),
        colour=colour_wanted(stream, no_color=getattr(args, "no_color", False)),
        fail_on_inconclusive=args.fail_on_inconclusive,
    )


def check_same_runs(baseline: Sequence[Path], candidate: Sequence[Path]) -> list[str]:
    """A warning when a run file sits on both sides: every case then compares with itself."""
    base = {p.resolve() for p in baseline}
    same = [str(p) for p in (c.resolve() for c in candidate) if p in base]
    if not same:
        return []
    return [
        f"the baseline and the candidate share {', '.join(same)}: its cases are compared with themselves, "
        "so the comparison shows nothing about a change"
    ]
