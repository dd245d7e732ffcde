"""``-k EXPR``: pick benchmarks by name as pytest's ``-k`` does.

A word matches a benchmark whose full name contains it (case-insensitive); words combine with
``and``, ``or``, ``not`` and parentheses: ``-k 'ddp and not w1'``. Parsed here, never evaluated.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from dpbench.results.load import ResultsError

__all__ = ["keyword_matcher"]

_TOKEN = re.compile(r"\s*(\(|\)|[^\s()]+)")
_OPERATORS = {"and", "or", "not"}


def _tokens(expr: str) -> list[str]:
    out, pos = [], 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None:  # only trailing whitespace is left
            break
        out.append(m.group(1))
        pos = m.end()
    return out


def keyword_matcher(expr: str) -> Callable[[str], bool]:
    """A predicate on benchmark names for ``expr``; a malformed expression is a ResultsError."""
    tokens = _tokens(expr)
    pos = 0

    def bad(what: str) -> ResultsError:
        return ResultsError(f"-k: expected an expression like 'ddp and not w1', found {expr!r} ({what})")

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> str:
        nonlocal pos
        pos += 1
        return tokens[pos - 1]

    def disjunction() -> Callable[[str], bool]:
        parts = [conjunction()]
        while peek() == "or":
            take()
            parts.append(conjunction())
        return lambda name: any(p(name) for p in parts)

    def conjunction() -> Callable[[str], bool]:
        parts = [negation()]
        while peek() == "and":
            take()
            parts.append(negation())
        return lambda name: all(p(name) for p in parts)

    def negation() -> Callable[[str], bool]:
        if peek() == "not":
            take()
            inner = negation()
            return lambda name: not inner(name)
        return atom()

    def atom() -> Callable[[str], bool]:
        token = peek()
        if token is None:
            raise bad("it ends too early")
        take()
        if token == "(":
            inner = disjunction()
            if peek() != ")":
                raise bad("a '(' is not closed")
            take()
            return inner
        if token == ")" or token in _OPERATORS:
            raise bad(f"{token!r} where a name was expected")
        word = token.lower()
        return lambda name: word in name.lower()

    if not tokens:
        return lambda name: True
    matcher = disjunction()
    if peek() is not None:
        raise bad(f"{peek()!r} after a complete expression")
    return matcher
