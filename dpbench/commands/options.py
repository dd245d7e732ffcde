"""What every subcommand's parser shares, defined once: ``--results`` and ``--no-color``, how a
saved run is named in help, the ``examples:`` epilog and its formatter, the checks of a choice and
of a list of names, and the parser whose every usage error is one line naming the option, what was
expected, what was found and the closest name.
"""

from __future__ import annotations

import argparse
import re
import sys

# The checks are the root's (the gate and dpbench run check choices and names too); named here with
# the parsers' other checks.
from dpbench.errors import UsageError, check_choice, check_names, did_you_mean, expected_one_of

__all__ = [
    "RUNS_HELP",
    "RUN_HELP",
    "ExamplesFormatter",
    "SuggestingParser",
    "add_no_color",
    "add_results_dir",
    "check_choice",
    "check_names",
    "examples",
    "int_list",
    "positive_int",
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


def int_list(raw: str, option: str) -> list[int]:
    """The comma-separated integers >= 1 in ``raw`` (``--world-sizes 2,4``); else a :class:`UsageError`
    naming ``option``."""
    items = [v.strip() for v in raw.split(",") if v.strip()]
    if not items or not all(v.isdigit() and int(v) >= 1 for v in items):
        raise UsageError(f"{option}: expected comma-separated integers >= 1, found {raw!r}")
    return [int(v) for v in items]


def positive_int(raw: str) -> int:
    """An option's type for a count: an int >= 1, else argparse's one-line error."""
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an int >= 1, found {raw!r}")
    return value


_ARGUMENT = re.compile(r"argument (\S+): (.*)")
_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)")
_INVALID_VALUE = re.compile(r"invalid (\w+) value: (.*)")
_REQUIRED = "the following arguments are required: "
# A value that starts like a negative number (-5GB, -1,2, -.5): argparse takes it for an option.
_NEGATIVE_LIKE = re.compile(r"-[0-9.]")


class SuggestingParser(argparse.ArgumentParser):
    """argparse's parser, but every usage error is one line, ``PROG: error: OPTION: expected X, found
    Y``, with the closest name for a misspelt choice or option (``dpbench lst``, ``--trails``), and an
    option's value may start with ``-`` and a digit (``--device-memory -5GB`` reaches the option's own
    check). Subparsers made by ``add_subparsers`` are of the same class, so the same holds for them."""

    def parse_known_args(self, args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(self._join_negative_values(args), namespace)

    def parse_args(self, args=None, namespace=None):
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:
            # Said by the subcommand's parser, the closest name taken from its options and the main parser's.
            chain = self._chosen_parsers(namespace)
            options = [o for parser in chain for o in parser._option_string_actions if o.startswith("--")]
            first = next((e.split("=")[0] for e in extras if e.startswith("-")), "")
            close = did_you_mean(first, options) if first else ""
            chain[-1].exit(2, f"{chain[-1].prog}: error: unrecognized arguments: {' '.join(extras)}{close}\n")
        return namespace

    def error(self, message: str):  # argparse's hook for every usage error
        self.exit(2, f"{self.prog}: error: {self._one_line(message)}\n")

    def _join_negative_values(self, args: list[str]) -> list[str]:
        """``--opt -5GB`` as ``--opt=-5GB`` when ``--opt`` takes one value (up to a ``--``)."""
        out: list[str] = []
        i = 0
        while i < len(args):
            arg = args[i]
            if arg == "--":
                return out + args[i:]
            action = self._option_string_actions.get(arg)
            takes_one = action is not None and action.nargs is None
            if takes_one and i + 1 < len(args) and _NEGATIVE_LIKE.match(args[i + 1]):
                out.append(f"{arg}={args[i + 1]}")
                i += 2
                continue
            out.append(arg)
            i += 1
        return out

    def _chosen_parsers(self, namespace: argparse.Namespace) -> list[SuggestingParser]:
        """This parser and the subcommand parsers ``namespace`` went through, outermost first."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = action.choices.get(getattr(namespace, action.dest, None))
                if isinstance(chosen, SuggestingParser):
                    return [self, *chosen._chosen_parsers(namespace)]
        return [self]

    def _one_line(self, message: str) -> str:
        if message.startswith(_REQUIRED):
            names = message[len(_REQUIRED) :]
            action = self._action_named(names.split(", ")[0])
            return f"{names}: required, expected {self._expected(action)}, found none"
        m = _ARGUMENT.fullmatch(message)
        if not m:
            return message
        name, detail = m.groups()
        choice = _INVALID_CHOICE.fullmatch(detail)
        if choice:
            choices = [c.strip().strip("'") for c in choice.group(2).split(",")]
            found = choice.group(1)
            return expected_one_of(name, found, choices)
        invalid = _INVALID_VALUE.fullmatch(detail)
        if invalid:
            kind, found = invalid.groups()
            return f"{name}: expected {'an' if kind[0] in 'aeiou' else 'a'} {kind}, found {found}"
        if detail in ("expected one argument", "expected at least one argument"):
            return f"{name}: expected {self._expected(self._action_named(name))}, found none"
        return f"{name}: {detail}"

    def _action_named(self, name: str) -> argparse.Action | None:
        for action in self._actions:
            if (
                name in action.option_strings
                or name in (action.metavar, action.dest)
                or "/".join(action.option_strings) == name
            ):
                return action
        return None

    @staticmethod
    def _expected(action: argparse.Action | None) -> str:
        if action is None:
            return "a value"
        if action.choices:
            return f"one of {', '.join(map(str, action.choices))}"
        return f"a value ({action.metavar or action.dest.upper()})"
