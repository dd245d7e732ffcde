"""The ``dpbench`` console script: the parser of every subcommand, and how a failure becomes an exit code.

The subcommands live in :mod:`dpbench.commands`, one module each; ``SUBCOMMANDS`` lists them in
``--help`` order.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from dpbench.commands import SUBCOMMANDS
from dpbench.commands.options import SuggestingParser
from dpbench.schema import __version__

__all__ = ["SUBCOMMANDS", "build_parser", "main"]


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
    from dpbench.errors import UsageError
    from dpbench.results.load import ResultsError

    prog = f"dpbench {args.command}"
    try:
        return args.handler(args)
    except (UsageError, ResultsError) as e:  # bad input, or a saved run that cannot be read
        print(f"{prog}: error: {e}", file=sys.stderr)
        return EXIT_INPUT
    except OSError as e:  # an output file that cannot be written, a directory that vanished
        detail = f"{e.filename}: {e.strerror}" if e.filename and e.strerror else str(e)
        print(f"{prog}: error: {detail}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt as stop:  # Ctrl-C, or SIGTERM / SIGHUP where a command unwinds them alike
        from dpbench._children import stop_exit_code, stop_words

        print(f"{prog}: {stop_words(stop)}", file=sys.stderr)
        if argv is None:  # this process is the command itself (the console script)
            _leave_now(stop_exit_code(stop))
        return stop_exit_code(stop)
    except Exception as e:
        if args.traceback:
            raise
        print(
            f"{prog}: internal error: {type(e).__name__}: {e} (rerun with --traceback and report it)", file=sys.stderr
        )
        return EXIT_INTERNAL


def _leave_now(code: int) -> None:
    """Exit at once, skipping the interpreter's teardown: a stopped command's children are gone and
    its output is flushed, and the teardown with torch loaded takes seconds on a busy machine —
    seconds the one who stopped it waits for (every process of a stopped run is gone within 5 s)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
