"""``dpbench ab --bisect-python P0 P1 … Pn -- -k NAME``: the first environment of an ordered list
(nightlies, say) in which the selected benchmarks regressed against the first one.

Each step is a whole ``dpbench ab`` of two environment sides (ABBA trials, the paired gate): the
first environment (known good) against the last one, then against the middle of the range still in
question, halving it until two neighbours are left — about log2(n) jobs. The question each step asks
is the job's own: did the selection regress (exit 1) or not (exit 0)? A step that ends any other way
(an environment that cannot be set up, an interrupt) ends the bisection with its code.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from dpbench.ab.environments import BASE, HEAD, SideSpec
from dpbench.ab.revisions import ABError, say

__all__ = ["bisect_environments", "check_bisect"]

NO_REGRESSION, REGRESSION = 0, 1


def check_bisect(pythons: Sequence[str], *, named: Sequence[str]) -> list[Path]:
    """The ordered interpreters, or :class:`ABError` (one line) where the command line mixes them with sides."""
    if len(pythons) < 2:
        raise ABError(f"--bisect-python: expected at least two environments in order, found {len(pythons)}")
    if named:
        raise ABError(f"{named[0]}: expected no sides with --bisect-python (its first environment is the base)")
    return [Path(p).absolute() for p in pythons]


def bisect_environments(pythons: Sequence[Path], run: Callable[[SideSpec, SideSpec], int]) -> tuple[int, int | None]:
    """``(exit code, index of the first regressed environment or None)``; ``run(base, head)`` is one A/B job."""
    base = SideSpec(side=BASE, python=pythons[0])

    def step(index: int) -> int:
        say(f"bisect: environment {index} of {len(pythons) - 1} ({pythons[index]}) against environment 0")
        code = run(base, SideSpec(side=HEAD, python=pythons[index]))
        verdict = {NO_REGRESSION: "no regression", REGRESSION: "regressed"}.get(code, f"stopped (exit {code})")
        say(f"bisect: environment {index}: {verdict}")
        return code

    code = step(len(pythons) - 1)
    if code != REGRESSION:
        return code, None
    good, bad = 0, len(pythons) - 1
    while bad - good > 1:
        mid = (good + bad) // 2
        code = step(mid)
        if code == REGRESSION:
            bad = mid
        elif code == NO_REGRESSION:
            good = mid
        else:
            return code, None
    return REGRESSION, bad


def report(pythons: Sequence[Path], code: int, first: int | None) -> int:
    """The bisection's answer on stdout; its exit code (1: found, 0: the last is no regression)."""
    if first is not None:
        print(
            f"bisect: first regressed environment: {first} ({pythons[first]}); the one before it, {first - 1} "
            f"({pythons[first - 1]}), did not regress against environment 0 ({pythons[0]})"
        )
    elif code == NO_REGRESSION:
        print(f"bisect: the last environment ({pythons[-1]}) did not regress against the first ({pythons[0]})")
    sys.stdout.flush()
    return code
