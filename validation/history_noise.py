"""The noise model that synthetic histories are drawn from, in one place.

A trial time is ``true level × run offset × trial noise``, both lognormal: every run (a commit's
job) shifts all of its trials by one offset (the machine that day, the build), and each fresh
process adds its own noise on top. When a fit on real runs (``python -m validation.aa_check``) changes the model,
swap :data:`NOISE` (or pass another :class:`SeriesNoiseModel`) and
rerun ``python -m validation.simulate_history`` to re-check the detection rates and ``DEFAULT_ALPHA``.

Used by ``scripts/`` and the tests only: no runtime module imports it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from dpbench.stats import coefficient_of_variation, log_t_interval

__all__ = ["NOISE", "SeriesNoiseModel", "creep_levels", "draw_series", "step_levels", "synthetic_run"]


@dataclass(frozen=True, kw_only=True)
class SeriesNoiseModel:
    trial_cv: float = 0.05  # within a run, from fresh process to fresh process (log sd)
    # One offset per run, shared by its trials (log sd): the run offset of the noise model fitted by
    # python -m validation.aa_check with a fresh forkserver helper each trial pass; trial_cv is the detection
    # targets' 5%, not that model's trial sd (measurements: docs/calibration.md#history-noise-model).
    run_offset_cv: float = 0.018
    trials: int = 5  # trials per commit


NOISE = SeriesNoiseModel()


def draw_series(levels: Sequence[float], rng: random.Random, noise: SeriesNoiseModel = NOISE) -> list[list[float]]:
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


def synthetic_run(
    *,
    commit: str | None,
    date: str,
    levels: dict[str, float],
    rng: random.Random,
    noise: SeriesNoiseModel = NOISE,
    machine: dict | None = None,
    control_s: float = 0.004,
) -> dict:
    """A minimal schema-2 pytest-benchmark document: one training benchmark per entry of
    ``levels`` (pytest name -> true seconds per step), trials drawn from ``noise``, a steady
    control (1% noise). For the history tests and ``python -m benchmarks.history_scale``."""
    benchmarks = []
    for name, level in levels.items():
        (trials,) = draw_series([level], rng, noise)
        suite = name.split("[")[0].removeprefix("test_")
        workload = name.split("-")[-2] if name.count("-") >= 2 else "mlp"
        lo, hi = log_t_interval(trials)  # written by the suites, as in real schema-2 runs
        extra = {
            "schema": 2,
            "kind": "training",
            "suite": suite,
            "strategy": "ddp",
            "workload": workload,
            "world_size": 2,
            "global_batch": 64,
            "case_key": f"case|{name}",
            "step_time_s": sorted(trials)[len(trials) // 2],
            "step_time_ci95": [lo, hi],
            "trials": {
                "count": len(trials),
                "step_time_s": trials,
                "cv": coefficient_of_variation(trials),
                "control_s": [control_s * rng.lognormvariate(0, 0.01) for _ in trials],
            },
        }
        benchmarks.append(
            {
                "name": name,
                "fullname": f"suites/test_{suite}.py::{name}",
                "group": suite,
                "stats": {"median": extra["step_time_s"], "rounds": len(trials), "data": trials},
                "extra_info": extra,
            }
        )
    doc = {
        "machine_info": machine
        or {"node": "runner-1", "gpus": [{"name": "NVIDIA H100"}], "driver": "550.54", "torch": "2.13.0"},
        "commit_info": {"id": commit, "branch": "main", "dirty": False} if commit else {},
        "benchmarks": benchmarks,
        "datetime": date,
        "version": "5.3.1",
    }
    return doc
