"""What everything that prints for a person shares on the terminal: colour only where a person
reads it, the width to fit, JSON to a file or to stdout (``-``). ("Did you mean" for names is
:func:`dpbench.errors.did_you_mean`: the layers below this one refuse names too.)

It sits in ``results`` because the lowest layer that prints (the saved-run listing) is here; the
gate, the report and the commands above use the same helpers, so every output reads alike. The
command line's own shared options live in :mod:`dpbench.commands.options`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from typing import Any, TextIO

__all__ = [
    "COLOURS",
    "colour_wanted",
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


def write_json(dest: str, doc: Any, *, indent: int = 1) -> None:
    """``doc`` as JSON into the file ``dest``, or onto stdout when ``dest`` is ``-``."""
    text = json.dumps(doc, indent=indent) + "\n"
    if dest == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    from dpbench._atomic import atomic_write_text

    atomic_write_text(dest, text)
