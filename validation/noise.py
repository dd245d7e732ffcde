"""The noise models dpbench's claims are calibrated against: fitted from saved runs, drawn from in
simulations. One model of a trial's time, in two views: the gate's (benchmarks within runs, with
controls: :class:`TrialNoiseModel`) and the history's (one benchmark's series over commits:
:class:`SeriesNoiseModel`, whose run offset is the fitted model's).

On a log scale a trial of benchmark *b* in run (session) *r* is

    log y = mu_b + R_r + U_br + e_brt,    e ~ N(0, s_b²),  U_br ~ N(0, tau_b²),  R_r ~ N(0, run_sd²)

with ``s_b`` (the within-run between-trial spread) and ``tau_b`` (the per-benchmark-per-run
offset: how much a fresh session moves this case) log-normal across benchmarks. A control
trial is ``log c = nu_b + R_r + D_r + e_c``: it sees the run-wide offset, plus its own.

:func:`fit_noise_model` estimates every parameter from two or more saved runs of one commit on
one machine (``python -m validation.simulate_gate --fit RUN ...``); :func:`draw_side` draws one side of a
comparison as the gate's :class:`~dpbench.gate.judge.Pooled`, so a simulation goes through
the real :func:`dpbench.gate.family.judge_family`.

Used by the validation package and the tests only: no runtime module imports it.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from dpbench.gate.family import Item, judge_family
from dpbench.gate.judge import TREND_MIN_CASES, Pooled, lognormal_ml, lognormal_trend_ml, within_run_variance
from dpbench.gate.verdicts import Verdict
from dpbench.stats import (
    REMEASURE_SHARE,
    DisturbanceLimits,
    TrialSeries,
    disturbance_limits,
    left_out,
    median,
    percentile,
)

__all__ = [
    "ARMS",
    "CLEAN",
    "Disturbance",
    "HISTORY_RUNS",
    "JUMPY",
    "MODELS",
    "NOISE",
    "QUICK_RUNS",
    "SeriesNoiseModel",
    "TrialNoiseModel",
    "aa_false_alarms",
    "creep_levels",
    "draw_case_params",
    "draw_series",
    "draw_side",
    "draw_sides",
    "fit_noise_model",
    "level_for",
    "lognormal_ml",
    "measured_disturbances",
    "step_levels",
]

_Z90 = 1.2815515655446004  # standard normal 90th percentile: p90 / median of a log-normal = exp(z90 · sd)


@dataclass(frozen=True, kw_only=True)
class TrialNoiseModel:
    """Parameters as log-scale sds (≈ relative spreads). ``*_spread``: sd of log(sd) across benchmarks."""

    trial_sd: float  # median over benchmarks of the within-run between-trial log-sd
    trial_sd_spread: float
    case_run_sd: float  # median over benchmarks of tau_b
    case_run_sd_spread: float
    run_sd: float  # run-wide offset
    control_sd: float  # a control trial's own spread
    control_run_sd: float  # the control's run offset beyond the benchmarks' run-wide offset
    # Benchmarks' levels (mean log time) spread level_sd across cases; a case's log trial sd sits
    # trial_sd_slope · (its level − the median level) from log trial_sd (short steps are noisier).
    level_sd: float = 0.0
    trial_sd_slope: float = 0.0
    jumpy_fraction: float = 0.0  # a share of benchmarks whose tau is jumpy_sd instead (see JUMPY below)
    jumpy_sd: float = 0.0
    source: str = ""
    fitted: dict[str, Any] = field(default_factory=dict)  # per-benchmark estimates behind a fit

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "fitted"}

    def percentiles(self) -> dict[str, float]:
        """The p90 of the two log-normal spreads (for the validation page's table, docs/validation/gate.md)."""
        return {
            "trial_sd_p90": self.trial_sd * math.exp(_Z90 * self.trial_sd_spread),
            "case_run_sd_p90": self.case_run_sd * math.exp(_Z90 * self.case_run_sd_spread),
        }


# Provisional parameters, not fitted on an idle machine: a median trial log-sd of 5.8% (CV p90 ~2.5× the
# median), a per-run offset of 3% per case (measurements: docs/calibration.md#gate-noise-models).
CLEAN = TrialNoiseModel(
    trial_sd=0.058,
    trial_sd_spread=0.7,
    case_run_sd=0.03,
    case_run_sd_spread=0.5,
    run_sd=0.02,
    control_sd=0.02,
    control_run_sd=0.01,
    source="provisional (clean quick runs, not fitted on an idle machine)",
)
# CLEAN plus a few cases (5 of 70) whose session offset is jumpy_sd: a harness or machine that moves some
# cases far between sessions (measurements: docs/calibration.md#gate-noise-models).
JUMPY = TrialNoiseModel(
    **{
        **CLEAN.to_dict(),
        "jumpy_fraction": 5 / 70,
        "jumpy_sd": 0.3,
        "source": "before the harness fix: 5 of 70 cases jump by up to 2×",
    }
)

# The two models python -m validation.aa_check fitted on the 2-core development VM after the fresh-helper fix, as its
# validation table records them (docs: the gate's validation page), each named for the runs it was fitted
# to: four quick runs of one commit (QUICK_RUNS), and runs 5-8 of the history check (HISTORY_RUNS).
# The per-case offset the midday fit put at its floor (0) is 0.1% here, spread 0.
QUICK_RUNS = TrialNoiseModel(
    trial_sd=0.148,
    trial_sd_spread=0.20,
    trial_sd_slope=-0.24,
    level_sd=1.52,
    case_run_sd=0.001,
    case_run_sd_spread=0.0,
    run_sd=0.018,
    control_sd=0.185,
    control_run_sd=0.010,
    source="fitted: 4 quick runs, fresh helper each trial pass (2-core VM, midday)",
)
HISTORY_RUNS = TrialNoiseModel(
    trial_sd=0.158,
    trial_sd_spread=0.24,
    trial_sd_slope=-0.30,
    level_sd=1.54,
    case_run_sd=0.017,
    case_run_sd_spread=0.0,
    run_sd=0.015,
    control_sd=0.157,
    control_run_sd=0.029,
    source="fitted: runs 5-8 of the history check (2-core VM, afternoon)",
)


# Every model by the name the validation programs take (--scenario / --model).
MODELS: dict[str, TrialNoiseModel] = {
    "clean": CLEAN,
    "uniform": TrialNoiseModel(
        **{**CLEAN.to_dict(), "case_run_sd_spread": 0.0, "source": "clean, every case's between-run offset alike"}
    ),
    "jumpy": JUMPY,
    "quick-runs": QUICK_RUNS,
    "history-runs": HISTORY_RUNS,
}


# ---------------------------------------------------------------- series over commits (dpbench history)
@dataclass(frozen=True, kw_only=True)
class SeriesNoiseModel:
    """A series over commits: a trial time is ``true level × run offset × trial noise``, both
    lognormal: every run (a commit's job) shifts all of its trials by one offset (the machine that
    day, the build), and each fresh process adds its own noise on top."""

    trial_cv: float = 0.05
    """Within a run, from fresh process to fresh process (log sd): the history's detection
    targets' 5%, not a fitted trial sd (docs/calibration.md#history-noise-model)."""
    run_offset_cv: float = QUICK_RUNS.run_sd
    """One offset per run, shared by its trials (log sd): the run-wide offset of the model fitted
    with a fresh forkserver helper each trial pass (:data:`QUICK_RUNS`)."""
    trials: int = 5
    """Trials per commit."""


# The model synthetic histories are drawn from; `python -m validation.simulate_history` re-checks the
# detection rates and the history's DEFAULT_ALPHA against it.
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


# ---------------------------------------------------------------- fitting
def _per_run_logs(frames: Sequence[Any]) -> dict[str, list[tuple[list[float], list[float]]]]:
    """Per case (``case_key``, else the name): per run, (log trial times, log controls)."""
    out: dict[str, list[tuple[list[float], list[float]]]] = {}
    for frame in frames:
        rows = frame.drop_duplicates(["run_id", "fullname"], keep="last")
        seen: set[tuple[str, str]] = set()
        for run_id, name, key, times, controls, bad in zip(
            rows["run_id"],
            rows["fullname"],
            rows["case_key"],
            rows["trial_times"],
            rows["trial_controls"],
            rows["incomparable"],
        ):
            case = key if isinstance(key, str) else name
            if isinstance(bad, str) or not times or (run_id, case) in seen:
                continue  # a case published by two suites is one measurement: count it once
            seen.add((run_id, case))
            # A disturbed trial left out is NaN in its slot (dpbench.results.disturbed): not a trial to fit.
            out.setdefault(case, []).append(
                ([math.log(t) for t in times if t > 0], [math.log(c) for c in controls if c > 0])
            )
    return out


def fit_noise_model(frames: Sequence[Any], *, source: str = "") -> TrialNoiseModel:
    """Estimate every parameter from ≥ 2 runs of one commit (frames of :func:`runs_frame`, a run each
    or together). Cases need ≥ 2 trials a run for the within-run spread."""
    cases = {k: v for k, v in _per_run_logs(frames).items() if len(v) >= 2}
    if not cases:
        raise ValueError("fit_noise_model: expected two or more runs holding the same cases, found none")
    runs = min(len(v) for v in cases.values())
    cases = {k: v[:runs] for k, v in cases.items()}
    within = {k: within_run_variance([t for t, _ in v]) for k, v in cases.items()}
    means = {k: [statistics.fmean(t) for t, _ in v] for k, v in cases.items()}
    centred = {k: [m - statistics.fmean(ms) for m in ms] for k, ms in means.items()}
    offsets = [statistics.median(c[r] for c in centred.values()) for r in range(runs)]  # R_r
    tau2, resid_squares, trial_part = {}, {}, {}
    for k, c in centred.items():
        resid = [x - o for x, o in zip(c, offsets)]
        n_inv = statistics.fmean(1 / len(t) for t, _ in cases[k])
        own = within[k] if math.isfinite(within[k]) else 0.0
        tau2[k] = max(0.0, statistics.variance(resid) - own * n_inv)
        resid_squares[k], trial_part[k] = sum(r * r for r in resid), own * n_inv
    controls = {k: [statistics.fmean(cl) for _, cl in v if cl] for k, v in cases.items()}
    controls = {k: v for k, v in controls.items() if len(v) == runs}
    c_within = [w for w in (within_run_variance([cl for _, cl in cases[k]]) for k in controls) if math.isfinite(w)]
    c_offsets = (
        [statistics.median(v[r] - statistics.fmean(v) for v in controls.values()) for r in range(runs)]
        if controls
        else [0.0] * runs
    )
    finite = [k for k, w in within.items() if math.isfinite(w)]
    within_df = {k: sum(len(t) - 1 for t, _ in cases[k] if len(t) >= 2) for k in finite}
    levels = {k: statistics.fmean(ms) for k, ms in means.items()}
    centre = statistics.fmean(levels[k] for k in finite) if finite else 0.0
    trial_sd, trial_spread, slope = lognormal_trend_ml(
        [within[k] * within_df[k] for k in finite],
        [within_df[k] for k in finite],
        [levels[k] - centre for k in finite] if len(finite) >= TREND_MIN_CASES else None,
    )
    # Each case's run means scatter by tau² + (its trial variance / trials) around the run-wide offsets;
    # runs - 1 degrees of freedom (the offsets, estimated from every case, cost each case little).
    keys = list(resid_squares)
    case_sd, case_spread = lognormal_ml(
        [resid_squares[k] for k in keys], [runs - 1] * len(keys), [trial_part[k] for k in keys]
    )
    run_sd = statistics.stdev(offsets) if runs >= 2 else 0.0
    return TrialNoiseModel(
        trial_sd=trial_sd,
        trial_sd_spread=trial_spread,
        case_run_sd=case_sd,
        case_run_sd_spread=case_spread,
        level_sd=statistics.pstdev(levels.values()) if len(levels) >= 2 else 0.0,
        trial_sd_slope=slope,
        run_sd=run_sd,
        control_sd=math.sqrt(median(c_within)) if c_within else 0.0,
        control_run_sd=statistics.stdev([c - o for c, o in zip(c_offsets, offsets)]) if controls and runs >= 2 else 0.0,
        source=source or f"fitted from {runs} runs, {len(cases)} cases",
        fitted={
            "runs": runs,
            "cases": len(cases),
            "run_offsets": offsets,
            "trial_sd": {k: math.sqrt(w) for k, w in within.items() if math.isfinite(w)},
            "case_run_sd": {k: math.sqrt(t) for k, t in tau2.items()},
            "trial_sd_p90_observed": percentile([math.sqrt(w) for w in within.values() if math.isfinite(w)], 90)
            if any(math.isfinite(w) for w in within.values())
            else math.nan,
        },
    )


# ---------------------------------------------------------------- drawing
@dataclass(frozen=True, kw_only=True)
class CaseParams:
    trial_sd: float
    case_run_sd: float
    level: float = 0.0  # the case's log time relative to the median case's


def draw_case_params(
    model: TrialNoiseModel, rng: random.Random, count: int, trial_sd: float | None = None
) -> list[CaseParams]:
    """Heterogeneous benchmarks: each its own level, s_b (on the model's trend with level) and tau_b
    (``trial_sd`` fixes s_b for all)."""
    out = []
    for _ in range(count):
        level = rng.gauss(0, model.level_sd) if model.level_sd > 0 else 0.0
        s = (
            trial_sd
            if trial_sd is not None
            else model.trial_sd * math.exp(model.trial_sd_slope * level + rng.gauss(0, model.trial_sd_spread))
        )
        jumpy = rng.random() < model.jumpy_fraction
        tau = model.jumpy_sd if jumpy else model.case_run_sd * math.exp(rng.gauss(0, model.case_run_sd_spread))
        out.append(CaseParams(trial_sd=s, case_run_sd=tau, level=level))
    return out


def level_for(model: TrialNoiseModel, trial_sd: float) -> float:
    """Where a case of this trial sd sits on the model's trend (0 without one), kept within
    2.5 level sds: a steady case in a simulation is placed where the fitted runs have steady cases."""
    if not model.trial_sd_slope or not model.level_sd:
        return 0.0
    level = math.log(trial_sd / model.trial_sd) / model.trial_sd_slope
    return max(-2.5 * model.level_sd, min(2.5 * model.level_sd, level))


def draw_side(
    model: TrialNoiseModel,
    cases: Sequence[CaseParams],
    rng: random.Random,
    *,
    runs: int,
    trials: int,
    effects: Sequence[float] | None = None,
    control_effect: float = 1.0,
    shared_offsets: Sequence[float] | None = None,
) -> list[Pooled]:
    """One side: ``runs`` sessions of ``trials`` trials of every case, as the gate pools them.

    ``effects``: per case, a factor on its time (1.25 = 25% slower). ``control_effect``: the
    machine's factor on every trial and control (a slower machine). ``shared_offsets``: per run, a
    machine offset shared with the other side's run of the same index (a pair in ``dpbench ab``);
    None draws every run's own."""
    offsets = list(shared_offsets) if shared_offsets is not None else [rng.gauss(0, model.run_sd) for _ in range(runs)]
    control_offsets = [o + rng.gauss(0, model.control_run_sd) for o in offsets]
    machine = math.log(control_effect)
    out = []
    for i, case in enumerate(cases):
        effect = math.log(effects[i]) if effects is not None else 0.0
        times, controls = [], []
        for r in range(runs):
            u = rng.gauss(0, case.case_run_sd)
            base = -4.6 + case.level + offsets[r] + u + effect + machine  # e^-4.6 ≈ 10 ms per step
            times.append([math.exp(base + rng.gauss(0, case.trial_sd)) for _ in range(trials)])
            controls.append(
                [math.exp(-5.5 + control_offsets[r] + machine + rng.gauss(0, model.control_sd)) for _ in range(trials)]
            )
        out.append(Pooled(unit="s/step", runs=times, control_runs=controls, case_key=f"case{i}"))
    return out


def draw_sides(
    model: TrialNoiseModel,
    cases: Sequence[CaseParams],
    rng: random.Random,
    *,
    trials: int,
    paired: bool,
    effects: Sequence[float] | None = None,
    machine: float = 1.0,
) -> tuple[list[Pooled], list[Pooled]]:
    """Both sides of one simulated job: ``dpbench compare`` (one run of ``trials`` trials a side) or,
    ``paired``, ``dpbench ab`` (``trials`` one-trial runs a side, run i of each sharing the machine's
    offset). The candidate carries ``effects`` and the ``machine``'s factor (controls included)."""
    if paired:
        shared = [rng.gauss(0, model.run_sd) for _ in range(trials)]
        base = draw_side(model, cases, rng, runs=trials, trials=1, shared_offsets=shared)
        cand = draw_side(
            model, cases, rng, runs=trials, trials=1, shared_offsets=shared, effects=effects, control_effect=machine
        )
        return base, cand
    base = draw_side(model, cases, rng, runs=1, trials=trials)
    return base, draw_side(model, cases, rng, runs=1, trials=trials, effects=effects, control_effect=machine)


# A/A gate jobs with disturbed trials: does a busy minute on the machine make the gate cry wolf?
#
# Each simulated job draws both sides from the gate's noise model (:mod:`validation.noise`),
# then disturbs each trial with probability ``rate`` (1 in 50 by default): its step time and its
# control are multiplied by a pair drawn from measured disturbances (:func:`measured_disturbances`:
# the disturbed trials of a real run, each its control's ratio to its placement's median and its
# step time's ratio to its case's median). The gate then judges the job three ways:
#
# - ``raw``: every trial as measured (what the gate judged before disturbed trials were found);
# - ``left_out``: disturbed trials found by :func:`dpbench.stats.disturbance_limits` and left out
#   (:func:`dpbench.stats.left_out`), none measured again;
# - ``remeasured``: as the session does, at most ``REMEASURE_SHARE`` of the trials measured again
#   (a further trial of the same session, itself disturbed with the same probability), a clean one
#   taking the slot.
#
# A false alarm is a job in which any benchmark is REGRESSED. Used by ``validation`` and the tests only.
ARMS = ("raw", "left_out", "remeasured")


@dataclass(frozen=True, kw_only=True)
class Disturbance:
    """What a busy machine did to one trial: factors on its control and on its step time."""

    control: float
    step: float


def measured_disturbances(frame) -> list[Disturbance]:
    """The disturbed trials of the runs in ``frame`` (:func:`dpbench.results.frame.runs_frame`), each
    case once: their control over the median control of the run's trials of that placement, and
    their step time over the median of the case's other trials."""
    out = []
    seen = set()
    for _, row in frame.iterrows():
        key = (row["run_id"], row["case_key"] if isinstance(row["case_key"], str) else row["fullname"])
        found = row["disturbed"] if isinstance(row["disturbed"], list) else []
        if key in seen or not found:
            continue
        seen.add(key)
        others = [t for t in row["trial_times"] if t > 0]
        controls = [c for c in row["trial_controls"] if c > 0]
        for d in found:
            if others and controls and d["step_time_s"] and d["control_s"]:
                out.append(
                    Disturbance(
                        control=d["control_s"] / _median(controls),
                        step=d["step_time_s"] / _median(others),
                    )
                )
    return out


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def _disturb(side: list[Pooled], rng: random.Random, rate: float, found: Sequence[Disturbance], trials: int) -> int:
    """Disturb each trial (planned and spare) with probability ``rate``; returns the planned ones hit."""
    hits = 0
    for pooled in side:
        for times, controls in zip(pooled.runs, pooled.control_runs):
            for i in range(len(times)):
                if rng.random() < rate:
                    d = rng.choice(found)
                    times[i] *= d.step
                    controls[i] *= d.control
                    hits += i < trials
    return hits


def _series(pooled: Pooled, trials: int) -> TrialSeries:
    return TrialSeries(
        placement="one-host", values=tuple(pooled.runs[0][:trials]), controls=tuple(pooled.control_runs[0][:trials])
    )


def _judged(side: list[Pooled], trials: int, arm: str) -> list[Pooled]:
    """One side as the gate pools it under ``arm`` (each pooled side holds one run of ``2 × trials``
    trials: the planned ones first, then the spares a re-measurement draws from)."""
    planned = [_series(p, trials) for p in side]
    if arm == "raw":
        return [_pooled(p, list(s.values), list(s.controls)) for p, s in zip(side, planned)]
    limits = disturbance_limits(planned)
    why = [[limits.why(s, i) for i in range(trials)] for s in planned]
    if arm == "remeasured":
        budget = max(1, math.floor(REMEASURE_SHARE * trials * len(side)))
        for c, (pooled, s) in enumerate(zip(side, planned)):
            values, controls = list(s.values), list(s.controls)
            for i in range(trials):
                if why[c][i] is None or budget <= 0:
                    continue
                budget -= 1
                spare_t, spare_c = pooled.runs[0][trials + i], pooled.control_runs[0][trials + i]
                if _clean_again(limits, s, why[c], i, spare_t, spare_c):
                    values[i], controls[i], why[c][i] = spare_t, spare_c, None
            planned[c] = TrialSeries(placement=s.placement, values=tuple(values), controls=tuple(controls))
    out = []
    for pooled, s, w in zip(side, planned, why):
        drop = left_out(w)
        out.append(
            _pooled(
                pooled,
                [v for v, d in zip(s.values, drop) if not d],
                [c for c, d in zip(s.controls, drop) if not d],
            )
        )
    return out


def _clean_again(limits: DisturbanceLimits, s: TrialSeries, why: list, i: int, value: float, control: float) -> bool:
    clean = [v for j, v in enumerate(s.values) if j != i and why[j] is None]
    again = TrialSeries(placement=s.placement, values=(*clean, value), controls=(*[math.nan] * len(clean), control))
    return limits.why(again, len(clean)) is None


def _pooled(like: Pooled, times: list[float], controls: list[float]) -> Pooled:
    return Pooled(unit=like.unit, runs=[times], control_runs=[controls], case_key=like.case_key)


def aa_false_alarms(
    model: TrialNoiseModel,
    found: Sequence[Disturbance],
    *,
    jobs: int,
    benchmarks: int,
    trials: int,
    rate: float,
    threshold: float,
    alpha: float,
    seed: int = 0,
) -> dict[str, int]:
    """Per arm, how many of ``jobs`` A/A jobs failed (any benchmark REGRESSED); also ``disturbed``:
    the planned trials disturbed over all jobs, and ``jobs``."""
    rng = random.Random(seed)
    failed = dict.fromkeys(ARMS, 0)
    disturbed = 0
    for _ in range(jobs):
        cases = draw_case_params(model, rng, benchmarks)
        sides = [draw_side(model, cases, rng, runs=1, trials=2 * trials) for _ in range(2)]
        for side in sides:
            disturbed += _disturb(side, rng, rate, found, trials)
        for arm in ARMS:
            base, cand = (_judged(side, trials, arm) for side in sides)
            items = [Item(name=f"b{i}", base=b, cand=c) for i, (b, c) in enumerate(zip(base, cand))]
            judged, _ = judge_family(items, threshold=threshold, alpha=alpha)
            failed[arm] += any(b.verdict == Verdict.REGRESSED for b in judged)
    return {**failed, "disturbed": disturbed, "jobs": jobs}
