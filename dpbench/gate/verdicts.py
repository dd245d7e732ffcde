"""What the gate says: the verdict strings, one benchmark's comparison, and the whole comparison."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum

__all__ = ["BenchmarkComparison", "GateComparison", "Family", "GateWarning", "Verdict", "WarningKind"]


class Verdict(str, Enum):
    """A benchmark's verdict; saved in ``--json`` output, so the strings never change."""

    REGRESSED = "regressed"  # slower than the control explains, beyond the threshold, significant (Holm)
    IMPROVED = "improved"
    UNCHANGED = "unchanged"
    INCONCLUSIVE = "inconclusive"  # beyond the threshold but not significant, too few trials, or the machine
    INCOMPARABLE = "incomparable"  # the per-step time is not derivable the same way on both sides
    MISSING = "missing"  # in the baseline, not in the candidate
    NEW = "new"  # only in the candidate


@dataclass(kw_only=True)
class BenchmarkComparison:
    name: str
    verdict: Verdict
    unit: str = ""
    case_key: str | None = None
    baseline_s: float = math.nan  # median of the pooled trial times (seconds per step or call)
    candidate_s: float = math.nan
    ratio: float = math.nan  # candidate_s / baseline_s: > 1 is slower
    excess: float = math.nan  # ratio ÷ the machine's shift (the controls' median, where it moved that way)
    threshold: float = math.nan
    p_value: float = math.nan  # one-sided, in the direction the benchmark moved
    p_adjusted: float = math.nan  # Holm over the comparison's distinct cases
    test: str = ""
    baseline_trials: int = 0
    candidate_trials: int = 0
    pairs: int = 0  # paired comparisons (dpbench ab): trials paired by schedule position
    control_ratio: float = math.nan  # median candidate control / median baseline control (this benchmark's)
    note: str = ""
    # The variances the test assumed (log scale), for planning the next measurement (gate.next_step):
    trial_var: float = math.nan  # of one log trial (or one pair's log ratio): more trials shrink its share
    fixed_var: float = math.nan  # of the log change, beyond the trials' share: between-run offset + machine shift
    session_var: float = math.nan  # fixed_var's between-run part: more runs a side (fresh sessions) shrink it
    runs: int = 0  # runs a side behind the test (the fewer side's)


@dataclass(kw_only=True)
class Family:
    """What the comparison estimated from all its benchmarks at once (log-scale sds as ratios − 1)."""

    method: str = ""
    size: int = 0  # distinct cases tested (the Holm family)
    prior_sd: float = math.nan  # the run's typical between-trial spread (the median benchmark's)
    prior_spread: float = math.nan  # how the benchmarks' trial spreads differ: sd of their log sds
    prior_slope: float = 0.0  # how a benchmark's log sd moves per log of its step time (0: no trend fitted)
    # How far a fresh session moves a case (the per-benchmark-per-run offset τ), log-normal across cases:
    between_run_sd: float = math.nan  # the median case's, fitted from this comparison's scatter
    between_run_spread: float = math.nan  # sd of log τ across cases assumed (at least BETWEEN_SPREAD_FLOOR)
    between_run_sd_aa: float = math.nan  # the median case's, measured by the baseline and --aa runs (NaN without)
    between_run_spread_aa: float = math.nan  # and its spread across cases there
    control_shift: float = math.nan  # median over benchmarks of the control ratio
    median_shift: float = math.nan  # median over benchmarks of the step-time ratio
    # What each case is judged beyond: "benchmarks" (the median of the other cases' ratios), "controls"
    # (the benchmarks as a whole moved beyond the controls: the code moved everything), or "none".
    shift_basis: str = ""
    broad_change: float = math.nan  # median benchmark ratio ÷ median control ratio (NaN without controls)
    # The reference cases (those that moved as the controls did: dpbench.gate.machine) the machine's move
    # and the between-run offset were read from, and whether the controls chose them.
    reference_size: int = 0
    reference_anchored: bool = False
    # The broad test: the reference's median move beyond the controls' (a ratio), its p against no such
    # move and that p after Holm with the cases'; and the job's verdict on a move of (nearly) everything
    # (dpbench.gate.broad.Broad: none, regression, improvement, machine, unsettled) with its sentence.
    broad_gap: float = math.nan
    broad_p: float = math.nan
    broad_p_adjusted: float = math.nan
    broad: str = "none"
    broad_note: str = ""


class WarningKind(str, Enum):
    """What a comparison's warning is about: code filters on this, never on the sentence."""

    MACHINES = "machines"  # a machine field differs between the sides (GateWarning.field names it)
    SCHEMAS = "schemas"  # the runs' extra_info schemas differ
    RUNTIME = "runtime"  # a runtime setting the workers read differs
    PROFILES = "profiles"  # the suites' profiles differ
    CONTROLS = "controls"  # the controls moved beyond the threshold: the machine changed
    CONTENTION = "contention"  # other processes used the CPUs during a side's trials
    HISTORY = "history"  # what --history judged against instead of the baseline's own trials


class GateWarning(str):
    """One warning of a comparison: the sentence itself (a ``str``, so it prints and saves as the
    sentence), with its :class:`WarningKind` and, for a machine difference, the machine field."""

    kind: WarningKind
    field: str | None

    def __new__(cls, sentence: str, *, kind: WarningKind, field: str | None = None) -> GateWarning:
        warning = super().__new__(cls, sentence)
        warning.kind, warning.field = kind, field
        return warning


@dataclass(kw_only=True)
class GateComparison:
    baseline: str
    candidate: str
    threshold: float
    alpha: float
    allow_missing: bool = False
    paired: bool = False
    warnings: list[GateWarning] = field(default_factory=list)
    benchmarks: list[BenchmarkComparison] = field(default_factory=list)
    family: Family = field(default_factory=Family)

    def of(self, verdict: Verdict) -> list[BenchmarkComparison]:
        return [b for b in self.benchmarks if b.verdict == verdict]

    @property
    def regressions(self) -> list[BenchmarkComparison]:
        return self.of(Verdict.REGRESSED)

    @property
    def counts(self) -> dict[str, int]:
        return {v.value: len(self.of(v)) for v in Verdict}

    @property
    def broad_regression(self) -> bool:
        """The job's own verdict: (nearly) everything slower while the controls held (dpbench.gate.broad)."""
        return self.family.broad == "regression"

    @property
    def job_inconclusive(self) -> bool:
        """The benchmarks moved beyond the threshold against the controls, not significantly: neither
        a regression of everything nor the machine (dpbench.gate.broad)."""
        return self.family.broad == "unsettled"

    def exit_decision(self, *, fail_on_inconclusive: bool = False) -> tuple[int, str]:
        """The job's exit code and why, in one place: 1 on a regression (of a case, or of
        everything) and when the candidate lost benchmarks (unless allowed); with
        ``fail_on_inconclusive`` also on an inconclusive case or job; else 0. The reason is the
        sentence the verdict line ends with."""
        n = len(self.regressions)
        if n:
            return 1, f"exit 1: {'a regression' if n == 1 else f'{n} regressions'}"
        if self.broad_regression:
            return 1, "exit 1: a regression of everything (the broad test)"
        if self.of(Verdict.MISSING) and not self.allow_missing:
            return 1, "exit 1: benchmarks missing from the candidate (--allow-missing accepts that)"
        if fail_on_inconclusive and self.job_inconclusive:
            return 1, "exit 1: inconclusive for the job, with --fail-on-inconclusive"
        if fail_on_inconclusive and self.of(Verdict.INCONCLUSIVE):
            return 1, "exit 1: inconclusive cases, with --fail-on-inconclusive"
        return 0, "exit 0: no regression"

    @property
    def exit_code(self) -> int:
        """The exit code without ``--fail-on-inconclusive`` (:meth:`exit_decision`)."""
        return self.exit_decision()[0]
