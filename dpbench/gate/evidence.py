"""One benchmark's evidence: its two sides' trial times turned into what the family's test needs.

:func:`evidence` takes a benchmark's baseline and candidate (:class:`~dpbench.gate.judge.Pooled`)
and, under the comparison's design (:class:`~dpbench.gate.judge.Method`), returns its
:class:`~dpbench.gate.judge.Evidence`: the log difference, the benchmark's own variance estimate
with its degrees of freedom, and how much of the trial and between-run variances the difference
carries (see :mod:`dpbench.gate.judge` for the model). Nothing here looks at the other benchmarks:
:func:`dpbench.gate.family.judge_family` weighs every benchmark's evidence together afterwards.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from dpbench.gate.judge import Evidence, Method, Pooled

__all__ = ["evidence"]


def _logs(run: Sequence[float]) -> list[float]:
    return [math.log(t) for t in run]


def _mean_log(side: Pooled) -> float:
    return statistics.fmean(_logs(side.times))


def _share(side: Pooled) -> float:
    """Σ n_r² / N²: how much of one run's offset a side's mean carries (1 for one run)."""
    counts = [len(run) for run in side.runs if run]
    return sum(n * n for n in counts) / sum(counts) ** 2


def _within(sides: Sequence[Pooled]) -> tuple[float, int]:
    """Pooled variance of log trials around their own run's mean, and its degrees of freedom."""
    ss, df = 0.0, 0
    for side in sides:
        for run in side.runs:
            if len(run) >= 2:
                logs = _logs(run)
                mean = statistics.fmean(logs)
                ss += sum((v - mean) ** 2 for v in logs)
                df += len(logs) - 1
    return (ss / df if df else math.nan), df


def _across(sides: Sequence[Pooled]) -> tuple[float, int]:
    """Pooled variance of log trials around their side's mean (every trial its own run)."""
    ss, df = 0.0, 0
    for side in sides:
        logs = _logs(side.times)
        if len(logs) >= 2:
            mean = statistics.fmean(logs)
            ss += sum((v - mean) ** 2 for v in logs)
            df += len(logs) - 1
    return (ss / df if df else math.nan), df


def evidence(base: Pooled, cand: Pooled, method: Method) -> Evidence:
    """The log difference and its variance terms for one benchmark under ``method``."""
    if method == Method.PAIRED:
        ratios = [math.log(c) - math.log(b) for b_run, c_run in zip(base.runs, cand.runs) for b, c in zip(b_run, c_run)]
        s2 = statistics.variance(ratios) if len(ratios) >= 2 else math.nan
        return Evidence(
            diff=statistics.fmean(ratios),
            s2=s2,
            df=max(0, len(ratios) - 1),
            a=1 / len(ratios),
            b=0.0,
            pairs=len(ratios),
            level=_mean_log(base),
        )
    nb, nc = len(base.times), len(cand.times)
    diff = _mean_log(cand) - _mean_log(base)
    if method == Method.RUNS:
        s2, df = _across((base, cand))
        return Evidence(diff=diff, s2=s2, df=df, a=1 / nb + 1 / nc, b=0.0, level=_mean_log(base))
    s2, df = _within((base, cand))
    return Evidence(diff=diff, s2=s2, df=df, a=1 / nb + 1 / nc, b=_share(base) + _share(cand), level=_mean_log(base))
