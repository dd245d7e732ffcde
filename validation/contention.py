"""The noise model's contention term: a busy neighbour that shares the machine for a while (another
job on a CI runner, a test suite) slows every configuration whose trials it overlaps, each by its
own factor — a one-process configuration and a two-rank one compete for the cores differently, so
pairing trial i with trial i does not cancel it (the claims issue 64 quotes: "zero w1 1.80× single",
"ddp w1 0.67× single" on one machine). The factors and the CPU shares the sampler read beside them
are taken from real contended runs (:func:`measured_contention`); :class:`ContentionModel` says how
often a pass of trials meets the neighbour and how often the sampler misses it. Drawn on top of
:mod:`validation.noise`'s trials by ``python -m validation.simulate_contention``.

Used by the validation package and the tests only: no runtime module imports it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from dpbench.stats import median

__all__ = ["Contention", "ContentionModel", "measured_contention"]


@dataclass(frozen=True, kw_only=True)
class Contention:
    """What a busy neighbour did to one trial: the factor on its step time (over the same case's
    median on a quiet run) and the share of all cores (0–1) other processes took while it ran."""

    step: float
    share: float
    case: str = ""
    """The measured case and run it comes from (``run 1: single-mlp-w1``): one configuration meets a
    neighbour its own way (a one-process case loses more than a two-rank one), so a draw keeps to one."""


def _case_trials(run: dict) -> dict[str, tuple[list[float], list[float]]]:
    """Per case (``case_key``, else the name) of a saved run (its JSON): its trials' step times and
    other processes' share of the cores per trial (NaN where not sampled)."""
    from dpbench.decision.contention import trial_shares

    cores = (run.get("machine_info") or {}).get("cpu_count")
    out: dict[str, tuple[list[float], list[float]]] = {}
    for bench in run.get("benchmarks") or []:
        extra = bench.get("extra_info") or {}
        trials = extra.get("trials") or {}
        times = [t for t in trials.get("step_time_s") or [] if isinstance(t, (int, float)) and t > 0]
        shares = trial_shares(trials.get("sampler"), cores) or [math.nan] * len(times)
        key = extra.get("case_key") if isinstance(extra.get("case_key"), str) else bench["name"]
        if times and key not in out:
            out[key] = (times, shares[: len(times)] + [math.nan] * (len(times) - len(shares)))
    return out


def measured_contention(contended: Sequence[dict], quiet: dict) -> list[Contention]:
    """Every trial of the ``contended`` runs (saved runs' JSON) whose case the ``quiet`` run also
    measured: its step time over that case's quiet median, and the share the sampler read."""
    reference = {k: median(t) for k, (t, _) in _case_trials(quiet).items()}
    out = []
    for i, run in enumerate(contended, 1):
        for key, (times, shares) in _case_trials(run).items():
            if key in reference:
                case = f"run {i}: {key}"
                out.extend(Contention(step=t / reference[key], share=s, case=case) for t, s in zip(times, shares))
    return out


@dataclass(frozen=True, kw_only=True)
class ContentionModel:
    """How a busy neighbour meets a session's trials: each pass (trial i of every configuration)
    overlaps it with probability ``rate``; a configuration's trial in such a pass is slowed by a
    :class:`Contention` drawn from ``found`` — each configuration keeps to one measured case, drawn
    once a session, so the neighbour slows it consistently and pairing does not cancel it — whose
    share the sampler reads, or, with probability ``unsampled``, misses (NaN, as when its summary is
    absent)."""

    found: tuple[Contention, ...]
    rate: float
    unsampled: float = 0.0

    def draw(self, times: list[list[float]], rng: random.Random) -> list[list[float]]:
        """Slow ``times`` (per configuration, per trial) in place; return the shares read per trial."""
        trials = max((len(t) for t in times), default=0)
        busy = [rng.random() < self.rate for _ in range(trials)]
        cases: dict[str, list[Contention]] = {}
        for c in self.found:
            cases.setdefault(c.case, []).append(c)
        shares = []
        for series in times:
            mine = cases[rng.choice(sorted(cases))] if cases else []
            read = []
            for i in range(len(series)):
                if busy[i] and mine:
                    hit = rng.choice(mine)
                    series[i] *= hit.step
                    read.append(math.nan if rng.random() < self.unsampled else hit.share)
                else:
                    read.append(0.0)
            shares.append(read)
        return shares
