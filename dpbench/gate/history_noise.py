"""The noise model that synthetic histories are drawn from, in one place.

A trial time is ``true level × run offset × trial noise``, both lognormal: every run (a commit's
job) shifts all of its trials by one offset (the machine that day, the build), and each fresh
process adds its own noise on top. The parameters are placeholders until the gate-calibration
issue (16) fits them on real runs: swap :data:`NOISE` (or pass another :class:`NoiseModel`) and
rerun ``scripts/sim_history.py`` to re-check the detection rates and ``DEFAULT_ALPHA``.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

__all__ = ["NOISE", "NoiseModel", "creep_levels", "draw_series", "step_levels"]


@dataclass(frozen=True, kw_only=True)
class NoiseModel:
    trial_cv: float = 0.05  # within a run, from fresh process to fresh process (log sd)
    run_offset_cv: float = 0.02  # one offset per run, shared by its trials (log sd)
    trials: int = 5  # trials per commit


NOISE = NoiseModel()


def draw_series(levels: Sequence[float], rng: random.Random, noise: NoiseModel = NOISE) -> list[list[float]]:
    """One point per level (seconds), each ``noise.trials`` trial times drawn from the model."""
    out = []
    for level in levels:
        offset = level * rng.lognormvariate(0, noise.run_offset_cv)
        out.append([offset * rng.lognormvariate(0, noise.trial_cv) for _ in range(noise.trials)])
    return out


def step_levels(n: int, at: int, factor: float, base: float = 0.01) -> list[float]:
    """``base`` before point ``at``, ``base × factor`` from it on."""
    return [base * (factor if i >= at else 1.0) for i in range(n)]


def creep_levels(n: int, at: Sequence[int], factor: float, base: float = 0.01) -> list[float]:
    """A step of ``factor`` at each point of ``at``."""
    return [base * factor ** sum(i >= a for a in at) for i in range(n)]
