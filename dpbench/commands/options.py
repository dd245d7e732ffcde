"""What every subcommand's parser shares, defined once: ``--results`` and ``--no-color``, how a
saved run is named in help, the ``examples:`` epilog and its formatter, and the parser whose
"invalid choice" names the closest choice.
"""

from __future__ import annotations

import argparse
import re

from dpbench.results.console import did_you_mean

__all__ = [
    "RUNS_HELP",
    "RUN_HELP",
    "ExamplesFormatter",
    "SuggestingParser",
    "add_no_color",
    "add_results_dir",
    "examples",
]

# How the commands that read saved runs (report, compare) name them, in one place.
RUNS_HELP = "a results .json file, a directory (its newest run per machine) or a saved-run id like 0001"
# Where one run is wanted (each side of compare): a directory stands for its single newest run
# (resolve_run), since one side's runs must come from one machine.
RUN_HELP = "a results .json file, a directory (its newest run) or a saved-run id like 0001"


def add_results_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--results",
        metavar="DIR",
        default="results",
        help="pytest-benchmark storage that run ids refer to (default: results)",
    )


def add_no_color(parser: argparse.ArgumentParser) -> None:
    """``--no-color`` on a subcommand too (``dpbench compare A B --no-color``): SUPPRESS keeps the
    main parser's value when the subcommand does not repeat it."""
    parser.add_argument(
        "--no-color", action="store_true", default=argparse.SUPPRESS, help="no colour (also: NO_COLOR=1)"
    )


def examples(*lines: str) -> str:
    """An epilog of example command lines, for :class:`ExamplesFormatter`."""
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


class ExamplesFormatter(argparse.HelpFormatter):
    """argparse's formatter, but an ``examples:`` epilog keeps its lines as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("examples:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)")


class SuggestingParser(argparse.ArgumentParser):
    """argparse's parser whose "invalid choice" error names the closest choice (``dpbench lst``)."""

    def error(self, message: str):  # argparse's hook for every usage error
        m = _INVALID_CHOICE.search(message)
        if m:
            choices = [c.strip().strip("'") for c in m.group(2).split(",")]
            message += did_you_mean(m.group(1), choices)
        super().error(message)
