"""The ``dpbench history`` subcommand (registered by dpbench.cli).

Exit status: 1 when ``--fail-on-new N`` finds a confirmed, not accepted regression among the
newest N commits; otherwise 2 when a run file could not be read (it is named and skipped; every
output is still written); otherwise 0. The parser is built without importing pandas.
"""

from __future__ import annotations

import argparse
import sys

from dpbench.commands.options import ExamplesFormatter, add_results_dir, examples
from dpbench.errors import UsageError
from dpbench.results.console import write_json

__all__ = ["register_history"]


def register_history(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "history",
        help="every benchmark's step time over commits, and the commits where it changed",
        description="Build one series per machine and benchmark from every saved run, find and confirm the "
        "change points, and write a self-contained HTML page (plus --json / --markdown).",
        epilog=examples(
            "dpbench history --since origin/main~50 --fail-on-new 1",
            "dpbench history ci-results/ --json - | jq '.changes | length'",
        ),
        formatter_class=ExamplesFormatter,
    )
    p.add_argument(
        "runs",
        nargs="*",
        metavar="RUN|DIR",
        help="run files, saved-run ids or directories (every *.json below them); default: --results",
    )
    p.add_argument(
        "-o", "--output", default="history.html", metavar="FILE", help="the HTML page (default: history.html)"
    )
    p.add_argument("--json", metavar="FILE", help="write changes and series as JSON (-: to stdout)")
    p.add_argument("--markdown", metavar="FILE", help="write the regressions as Markdown (a CI job summary)")
    p.add_argument("--since", metavar="REV", help="only commits after REV (git rev-list REV..HEAD)")
    p.add_argument(
        "--fail-on-new",
        type=int,
        default=0,
        metavar="N",
        help="exit 1 when a regression, not accepted, begins within the newest N commits",
    )
    p.add_argument("--threshold", default="5%", help="the smallest change reported (default: 5%%)")
    p.add_argument("--alpha", type=float, default=None, help="p below which a change is confirmed (default: 1e-4)")
    p.add_argument(
        "--accepted",
        default="results/accepted.toml",
        metavar="FILE",
        help="accepted changes (default: results/accepted.toml; absent = none)",
    )
    p.add_argument("--repo-url", metavar="URL", help="link commits to URL/commit/SHA (default: from git remote origin)")
    p.add_argument("--title", default="dpbench history")
    add_results_dir(p)
    p.set_defaults(handler=_run_history)


def _run_history(args: argparse.Namespace) -> int:
    from dpbench._atomic import atomic_write_text
    from dpbench.gate.compare import parse_threshold
    from dpbench.history.accepted import read_accepted
    from dpbench.history.changepoints import DEFAULT_ALPHA
    from dpbench.history.formats import history_json, history_markdown
    from dpbench.history.git import repo_url
    from dpbench.history.series import load_history, run_files
    from dpbench.report.history_page import render_history_page
    from dpbench.results.units import fmt_p

    if args.fail_on_new < 0:
        raise UsageError(f"--fail-on-new: expected a number of commits >= 0, found {args.fail_on_new}")
    alpha = DEFAULT_ALPHA if args.alpha is None else args.alpha
    if not 0 < alpha < 1:
        raise UsageError(f"--alpha: expected a probability between 0 and 1, found {alpha!r}")
    history = load_history(
        run_files(args.runs, args.results),
        threshold=parse_threshold(args.threshold),
        alpha=alpha,
        accepted=read_accepted(args.accepted),
        since=args.since,
    )
    print(f"dpbench history: {history.order_note}", file=sys.stderr)
    for path, error in history.skipped:
        print(f"dpbench history: skipped {path}: {error}", file=sys.stderr)
    page = render_history_page(history, title=args.title, repo_url=args.repo_url or repo_url())
    written = atomic_write_text(args.output, page).resolve()
    # With --json - stdout is the JSON alone: the page's path goes to stderr then.
    print(written, file=sys.stderr if args.json == "-" else sys.stdout)
    if args.json:
        write_json(args.json, history_json(history))
    if args.markdown:
        atomic_write_text(args.markdown, history_markdown(history, newest=args.fail_on_new))
    new = history.new_regressions(args.fail_on_new) if args.fail_on_new else []
    for series, change in new:
        print(
            f"dpbench history: new regression: {series.name} on {series.machine}, "
            f"{change.commit_range[0][:10]}..{change.commit_range[1][:10]}, ratio {change.change.ratio:.3f}, "
            f"p = {fmt_p(change.change.p, digits=1)}",
            file=sys.stderr,
        )
    if new:
        return 1
    return 2 if history.skipped else 0
