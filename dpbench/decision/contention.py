"""How much of the machine other processes used while a case's trials ran.

Every trial's sampler summary (``extra_info["trials"]["sampler"]``) has the whole machine's CPU use
(its ``cpu`` row: percent of all cores) and each watched process's (``pid:N`` rows: percent of one
core). What is left — the machine's use minus the watched processes', as a share of all cores — is
other processes': a test suite, a compiler, another job on a shared runner. The gate reads it because
the controls, a few short matmul chains, can miss contention that the longer multi-process trials
meet (``docs/validation/gate.md#contention`` has A/A runs where they did).
"""

from __future__ import annotations

import math
from typing import Any

from dpbench.stats import median

__all__ = [
    "CONTENDED",
    "SPREAD_LIMIT",
    "contention_text",
    "foreign_cpu",
    "is_busy",
    "others_quiet",
    "run_share",
    "spread_text",
    "trial_shares",
    "trial_spread",
]

# Quiet runs on the development VM leave other processes 0–7% of the CPUs (upper quartile over a
# run's trials); runs taken beside a test suite 43–92% (medians): docs/validation/gate.md#contention.
CONTENDED = 0.2

SPREAD_LIMIT = 8.0
"""The largest spread (slowest kept trial over fastest) a configuration's trials may show and still
be claimed on. The noise models fitted on the 2-core development VM (``validation.noise``:
``quick-runs``, ``history-runs``) put a clean configuration's spread over 12 trials below 4.2× and
6.7× in 99 of 100 cases (``tests/decision/test_contention.py`` re-derives it): beyond 8×, something
the model does not cover slowed some trials — another job the sampler missed, or one that ran for
part of the trials only (a median share below :data:`CONTENDED`)."""


def is_busy(share: float, limit: float = CONTENDED) -> bool:
    """Other processes used more than ``limit`` of the machine (``share``, 0–1; NaN: not sampled, not busy)."""
    return share == share and share > limit


def run_share(case_shares: Any) -> float:
    """A run's share of the machine other processes used: the median over its cases of each case's
    (:func:`foreign_cpu`); NaN where no case was sampled."""
    known = [s for s in case_shares if isinstance(s, (int, float)) and not math.isnan(s)]
    return median(known) if known else math.nan


def others_quiet(share: float, limit: float = CONTENDED) -> bool:
    """The sampler read the trials (``share`` is not NaN) and other processes used at most ``limit``
    of the machine: what a wide spread of the controls is then not (a neighbour's)."""
    return share == share and not is_busy(share, limit)


def contention_text(share: float, whose: str) -> str:
    """``other processes used 78% of the CPUs during the candidate's trials``: what a busy case's
    trials met, ``whose`` naming them ("ddp w2's", "its", "the candidate's")."""
    return f"other processes used {share:.0%} of the CPUs during {whose} trials"


def trial_spread(values: Any) -> float:
    """The slowest of ``values`` (positive throughputs or times) over the fastest: how far a
    configuration's own trials spread (NaN with fewer than two)."""
    kept = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v) and v > 0]
    return max(kept) / min(kept) if len(kept) >= 2 else math.nan


def spread_text(spread: float, whose: str, limit: float = SPREAD_LIMIT) -> str:
    """``ddp w2's trials spread 27×, beyond the 8× a quiet machine's noise allows``: why a
    configuration whose trials spread past ``limit`` (:data:`SPREAD_LIMIT`) is not claimed on."""
    return f"{whose} trials spread {spread:.0f}×, beyond the {limit:.0f}× a quiet machine's noise allows"


def _trial_share(sampler: Any, cpu_count: int) -> float:
    devices = sampler.get("devices") if isinstance(sampler, dict) else None
    if not isinstance(devices, dict) or not isinstance(devices.get("cpu"), dict):
        return math.nan
    machine = devices["cpu"].get("cpu_pct_mean")
    if not isinstance(machine, (int, float)):
        return math.nan
    own = sum(
        v.get("cpu_pct_mean") or 0.0
        for k, v in devices.items()
        if k.startswith("pid:") and isinstance(v, dict) and isinstance(v.get("cpu_pct_mean"), (int, float))
    )
    return min(max(machine - own / cpu_count, 0.0), 100.0) / 100.0


def trial_shares(samplers: Any, cpu_count: Any) -> list[float]:
    """Per trial (a list of sampler summaries), the share of all cores (0–1) other processes used
    while it ran; NaN for a trial without one; [] without a known core count."""
    if not isinstance(samplers, list) or not isinstance(cpu_count, int) or cpu_count < 1:
        return []
    return [_trial_share(x, cpu_count) for x in samplers]


def foreign_cpu(trials: dict[str, Any], cpu_count: Any) -> float:
    """The median over a case's trials of the share of all cores (0–1) other processes used while the
    trial ran; NaN without sampler summaries or a known core count."""
    samplers = trials.get("sampler") if isinstance(trials, dict) else None
    shares = [s for s in trial_shares(samplers, cpu_count) if not math.isnan(s)]
    return median(shares) if shares else math.nan
