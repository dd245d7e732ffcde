"""The error every layer raises for a mistake in what the user asked for, and how it names the
closest known name.

:class:`UsageError`: an option or argument the command line (or a Python caller) cannot use — a
threshold out of range, an unknown column, two flags that exclude each other. It is distinct from
:class:`dpbench.results.ResultsError`, which says a saved run cannot be read or pooled. The command
line prints either as one line, ``dpbench CMD: error: …``, and exits 2. It lives at the root, beside
``schema`` and ``stats``, because the gate, history and the report check options too and must not
import the command line above them.

:func:`did_you_mean` is the one "did you mean" of every message that refuses a name — a
subcommand, an option, a strategy or its option, a workload, an hf model type, a config key — so
each reads alike; it is here, at the root, because the lowest layers (workloads, strategies) refuse
names too.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence

__all__ = ["UsageError", "check_choice", "check_names", "did_you_mean", "expected_names_from", "expected_one_of"]

# difflib's own default: a name at least this similar (its ratio) is offered.
_CLOSE = 0.6


class UsageError(ValueError):
    """An option or argument that cannot be used: the message names it, what was expected and what was found."""


def did_you_mean(value: str, known: Iterable[str], *, most: int = 1) -> str:
    """`` (did you mean 'list'?)`` for the known name closest to ``value`` — up to ``most`` of them,
    closest first (`` (did you mean 'gptj', 'gpt2' or 'biogpt'?)``), where the message does not list
    the known names whole — or '' when none is close."""
    close = [repr(name) for name in difflib.get_close_matches(str(value), list(known), n=most, cutoff=_CLOSE)]
    if not close:
        return ""
    names = close[0] if len(close) == 1 else f"{', '.join(close[:-1])} or {close[-1]}"
    return f" (did you mean {names}?)"


def expected_one_of(option: str, value: str, choices: Sequence[str]) -> str:
    """``--sort: expected one of verdict, change, name, p, found 'chnage' (did you mean 'change'?)``."""
    return f"{option}: expected one of {', '.join(choices)}, found {value!r}{did_you_mean(value, choices)}"


def expected_names_from(option: str, value: str, known: Sequence[str], *, what: str = "names") -> str:
    """``--columns: expected names from benchmark, change, …, found 'verdit' (did you mean 'verdict'?)``:
    one name of a list that is none of ``known`` (``what`` they are)."""
    return f"{option}: expected {what} from {', '.join(known)}, found {value!r}{did_you_mean(value, known)}"


def check_choice(option: str, value: str, choices: Sequence[str]) -> str:
    """``value`` when it is one of ``choices``; else a :class:`UsageError` naming ``option``, the
    choices and the closest one (:func:`expected_one_of`)."""
    if value not in choices:
        raise UsageError(expected_one_of(option, value, choices))
    return value


def check_names(option: str, raw: str, known: Sequence[str], *, what: str = "names") -> tuple[str, ...]:
    """The comma-separated names in ``raw``, each one of ``known``; else a :class:`UsageError` naming
    ``option``, the known names (``what`` they are) and the closest to the first unknown one."""
    names = tuple(v.strip() for v in raw.split(",") if v.strip())
    if not names:
        raise UsageError(f"{option}: expected comma-separated {what} from {', '.join(known)}, found {raw!r}")
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(expected_names_from(option, unknown[0], known, what=what))
    return names
