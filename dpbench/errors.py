"""The error every layer raises for a mistake in what the user asked for.

:class:`UsageError`: an option or argument the command line (or a Python caller) cannot use — a
threshold out of range, an unknown column, two flags that exclude each other. It is distinct from
:class:`dpbench.results.ResultsError`, which says a saved run cannot be read or pooled. The command
line prints either as one line, ``dpbench CMD: error: …``, and exits 2. It lives at the root, beside
``schema`` and ``stats``, because the gate, history and the report check options too and must not
import the command line above them.
"""

from __future__ import annotations

__all__ = ["UsageError"]


class UsageError(ValueError):
    """An option or argument that cannot be used: the message names it, what was expected and what was found."""
