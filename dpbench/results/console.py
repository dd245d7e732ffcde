"""What everything that prints for a person shares on the terminal: colour only where a person
reads it, the width to fit, JSON to a file or to stdout (``-``), "did you mean" for names, and the
checks of a choice and of a list of names that say it (the command line and ``dpbench run``'s
config file share them).

It sits in ``results`` because the lowest layer that prints (the saved-run listing) is here; the
gate, the report and the commands above use the same helpers, so every output reads alike. The
command line's own shared options live in :mod:`dpbench.commands.options`.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import sys
from collections.abc import Iterable, Sequence
from typing import Any, TextIO

from dpbench.errors import UsageError

__all__ = [
    "COLOURS",
    "check_choice",
    "check_names",
    "colour_wanted",
    "did_you_mean",
    "paint",
    "terminal_width",
    "write_json",
]

# ANSI SGR codes: what each word of the output means, not how it looks.
COLOURS = {"bad": "31;1", "good": "32", "unsure": "33", "dim": "2", "bold": "1"}


def colour_wanted(stream: TextIO = sys.stdout, *, no_color: bool = False) -> bool:
    """Colour only on a terminal, and never when asked not to (``--no-color``, or ``NO_COLOR`` set to
    anything non-empty, as no-color.org defines it)."""
    if no_color or os.environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def paint(text: str, what: str, on: bool) -> str:
    """``text`` in the colour for ``what`` (a key of :data:`COLOURS`) when ``on``; else unchanged."""
    return f"\x1b[{COLOURS[what]}m{text}\x1b[0m" if on and text else text


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def visible_len(text: str) -> int:
    return len(_ANSI.sub("", text))


def terminal_width(stream: TextIO = sys.stdout) -> int | None:
    """The terminal's columns when ``stream`` is one; None (no limit) into a file or a pipe."""
    isatty = getattr(stream, "isatty", None)
    if not (isatty and isatty()):
        return None
    return shutil.get_terminal_size().columns


def did_you_mean(value: str, known: Iterable[str]) -> str:
    """`` (did you mean 'list'?)`` for the closest known name, or '' when none is close."""
    close = difflib.get_close_matches(value, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_choice(option: str, value: str, choices: Sequence[str]) -> str:
    """``value`` when it is one of ``choices``; else a :class:`UsageError` naming ``option``, the choices
    and the closest one."""
    if value not in choices:
        raise UsageError(
            f"{option}: expected one of {', '.join(choices)}, found {value!r}{did_you_mean(value, choices)}"
        )
    return value


def check_names(option: str, raw: str, known: Sequence[str], *, what: str = "names") -> tuple[str, ...]:
    """The comma-separated names in ``raw``, each one of ``known``; else a :class:`UsageError` naming
    ``option``, the known names (``what`` they are) and the closest to the first unknown one."""
    names = tuple(v.strip() for v in raw.split(",") if v.strip())
    if not names:
        raise UsageError(f"{option}: expected comma-separated {what} from {', '.join(known)}, found {raw!r}")
    unknown = [n for n in names if n not in known]
    if unknown:
        close = did_you_mean(unknown[0], known)
        raise UsageError(f"{option}: expected {what} from {', '.join(known)}, found {unknown[0]!r}{close}")
    return names


def write_json(dest: str, doc: Any, *, indent: int = 1) -> None:
    """``doc`` as JSON into the file ``dest``, or onto stdout when ``dest`` is ``-``."""
    text = json.dumps(doc, indent=indent) + "\n"
    if dest == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    from dpbench._atomic import atomic_write_text

    atomic_write_text(dest, text)
