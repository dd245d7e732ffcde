"""The ``dpbench`` console script.

Subcommands register themselves: each entry of ``SUBCOMMANDS`` is a function that adds one
parser to argparse's subparsers and sets ``handler`` (``Namespace -> int``, the exit code)
as its default. To add a subcommand, write such a function and append it here.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from dpbench.gate.ab_cli import register_ab
from dpbench.gate.commands import register_compare
from dpbench.report.commands import register_report
from dpbench.report.history_command import register_history
from dpbench.results.console import ExamplesFormatter, SuggestingParser, examples
from dpbench.results.runs import register_runs
from dpbench.runner.command import register_run
from dpbench.runner.estimate import register_estimate
from dpbench.schema import __version__

if TYPE_CHECKING:
    from dpbench.strategies import OptionDoc

__all__ = ["SUBCOMMANDS", "build_parser", "main"]


def _list(args: argparse.Namespace) -> int:
    # Imported here: listing needs torch, the rest of the CLI does not.
    from dpbench.workloads import get_workload, list_workloads

    if args.json:
        from dpbench.results.console import write_json

        write_json(args.json, _list_json())
        return 0
    print("strategies (option=default  what it does):")
    _print_strategies()
    print("workloads:")
    for name in list_workloads():
        workload = get_workload(name)
        print(f"  {name:<12} {workload.description}".rstrip())
    return 0


def _print_strategies() -> None:
    """The options every strategy shares once, then each strategy's own, as its options dataclass declares them."""
    from dpbench.strategies import CommonOptions, describe_options, get_strategy, list_strategies

    shared = describe_options(CommonOptions)
    shared_names = {option.name for option in shared}
    print("  every strategy")
    _print_options(shared)
    for name in list_strategies():
        print(f"  {name}")
        options = describe_options(get_strategy(name).options_type)
        _print_options([option for option in options if option.name not in shared_names])


def _print_options(options: list[OptionDoc]) -> None:
    for option in options:
        print(f"    {f'{option.name}={option.default!r}':<30} {option.doc}".rstrip())
    if not options:
        print("    (no options of its own)")


def _list_json() -> dict:
    from dpbench.strategies import describe_options, get_strategy, list_strategies
    from dpbench.workloads import get_workload, list_workloads

    def plain(value):  # a default JSON cannot hold (a tuple of types, say) is shown as Python writes it
        return value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)

    return {
        "strategies": [
            {
                "name": name,
                "options": [
                    {"name": o.name, "default": plain(o.default), "doc": o.doc}
                    for o in describe_options(get_strategy(name).options_type)
                ],
            }
            for name in list_strategies()
        ],
        "workloads": [{"name": n, "description": get_workload(n).description} for n in list_workloads()],
    }


def register_list(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "list",
        help="list the strategies (with their options) and workloads",
        epilog=examples("dpbench list", "dpbench list --json - | jq '.workloads[].name'"),
        formatter_class=ExamplesFormatter,
    )
    parser.add_argument("--json", metavar="FILE", help="write the lists as JSON (-: to stdout)")
    parser.set_defaults(handler=_list)


SUBCOMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [
    register_report,
    register_compare,
    register_list,
    register_ab,
    register_history,
    register_runs,
    register_run,
    register_estimate,
]

# Exit codes: 0 ok, 1 a regression (compare), 2 unusable input or usage, 3 an internal error.
EXIT_INPUT, EXIT_INTERNAL = 2, 3


def build_parser() -> argparse.ArgumentParser:
    parser = SuggestingParser(prog="dpbench", description="Benchmark data-parallel training strategies.")
    parser.add_argument("--version", action="version", version=f"dpbench {__version__}")
    parser.add_argument("--no-color", action="store_true", help="no colour in the output (also: NO_COLOR=1)")
    parser.add_argument("--traceback", action="store_true", help="show the full traceback of an internal error")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for register in SUBCOMMANDS:
        register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse exits on --help, --version and usage errors
        return int(e.code or 0) if not isinstance(e.code, str) else EXIT_INPUT
    # Imported here: it pulls in pandas, which --help does not need.
    from dpbench.results.load import ResultsError

    prog = f"dpbench {args.command}"
    try:
        return args.handler(args)
    except ResultsError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return EXIT_INPUT
    except OSError as e:  # an output file that cannot be written, a directory that vanished
        detail = f"{e.filename}: {e.strerror}" if e.filename and e.strerror else str(e)
        print(f"{prog}: error: {detail}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if args.traceback:
            raise
        print(
            f"{prog}: internal error: {type(e).__name__}: {e} (rerun with --traceback and report it)", file=sys.stderr
        )
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
