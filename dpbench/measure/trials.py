"""Trials: every case is measured in several fresh-process trials, interleaved across the session.

Rounds inside one worker process share that process's luck: its memory layout, the cores it
landed on, the minute it ran in. On a shared machine whole processes and whole minutes move by
more than rounds do, so a statistic over rounds is honest about rounds and wrong about the
machine. The unit of repetition here is therefore a *trial* — freshly started workers (a new
pool, a new process group), untimed warm-up, a few timed rounds, then a fixed control
computation in the same workers — and the schedule runs trial 1 of every case, then trial 2 of
every case, … so that a slow minute spreads over all cases instead of sinking one (the pyperf /
asv habit). Everything downstream (report, gate) reasons across trials.

Nothing here imports pytest or torch: a case only has to provide ``key``, ``label`` and
``measure_trial(...)``; the measuring plugin drives a :class:`TrialSession` and publishes each
case's trials into pytest-benchmark through :func:`worker_clock`.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from dpbench.stats import left_out

__all__ = [
    "CaseResult",
    "Measurable",
    "TrialResult",
    "TrialSession",
    "advance_worker_clock",
    "reset_worker_clock",
    "worker_clock",
]


# ---------------------------------------------------------------- the clock pytest-benchmark reads
_CLOCK = [0.0]


def worker_clock() -> float:
    """The timer the suites give pytest-benchmark (``@pytest.mark.benchmark(timer=worker_clock)``).

    It stands still unless told how long a round took in the workers, so pytest-benchmark's
    statistics (and its terminal table) are the workers' device-synchronised seconds per step,
    never the parent's round trip to them.
    """
    return _CLOCK[0]


def reset_worker_clock() -> None:
    """Back to 0.0, so the next reading pytest-benchmark takes as a round's start is exactly 0 and
    its ``end - start`` is bit for bit the duration it was told (used as pytest-benchmark's setup)."""
    _CLOCK[0] = 0.0


def advance_worker_clock(seconds: float) -> None:
    if not seconds >= 0 or not math.isfinite(seconds):
        raise ValueError(f"seconds must be a finite, non-negative duration, got {seconds!r}")
    _CLOCK[0] += seconds


# ---------------------------------------------------------------- results
@dataclass(kw_only=True)
class TrialResult:
    """One trial of one case: what fresh workers measured."""

    trial: int
    """0-based index of the trial within its case."""
    order: int
    """Position in the session's whole schedule (0-based, across cases)."""
    started_at: float
    """Unix time."""
    steps_per_round: int
    round_times: list[float]
    """Seconds per step (per call) of each timed round, worker clock."""
    unit_times: list[float]
    """Every timed step (call) of the trial, worker clock."""
    control_s: float
    """The control computation, same workers and threads."""
    sampler: dict[str, Any] | None = None
    timeline: str | None = None
    """Path recorded in results (relative to the machine dir)."""
    case_metrics: dict[str, Any] | None = None
    """Untimed measurements of the case (``Run.case_metrics``), taken in its first trial only; the
    session keeps them on :attr:`CaseResult.case_metrics`."""
    detail: Any = None
    """What the case records beside the times, for its own extra_info: a
    :class:`dpbench.measure.cases.TrainingDetail` (training and convergence cases), a
    :class:`dpbench.measure.cases.CollectiveDetail`; the session never reads it."""
    placement: str = ""
    """Which ranks, threads and cores the trial ran on (JSON): controls are compared within one placement."""

    @property
    def value(self) -> float:
        """The trial's number: median seconds per step (per call) over all its timed steps."""
        return statistics.median(self.unit_times)


@dataclass(kw_only=True)
class CaseResult:
    """Every trial of one case, or why it has none."""

    key: str
    trials: list[TrialResult] = field(default_factory=list)
    skip_reason: str | None = None  # the case cannot run here (StrategyUnavailable)
    error: BaseException | None = None  # a trial failed; later trials were not run
    failed_trial: int | None = None
    case_metrics: dict[str, Any] | None = None  # measured once, in the first trial
    worker_start: str | None = None  # how the session started workers (harness_settings.worker_start)

    # Per trial slot: None, or why the trial in it was disturbed, whether a re-measurement replaced it
    # (the slot then holds the replacement, the disturbed trial's numbers under "measured") — set by
    # the session's re-measurement pass (dpbench.measure.remeasure); empty before it.
    disturbed: list[dict[str, Any] | None] = field(default_factory=list)

    @property
    def left_out(self) -> list[bool]:
        """Per slot: the trial every estimate leaves out (disturbed, not replaced; dpbench.stats.left_out)."""
        flags = (self.disturbed + [None] * len(self.trials))[: len(self.trials)]
        return left_out([f["why"] if f is not None and not f.get("replaced") else None for f in flags])

    @property
    def measured_values(self) -> list[float]:
        """Every slot's trial value, a disturbed trial's included (what the results keep)."""
        return [t.value for t in self.trials]

    @property
    def values(self) -> list[float]:
        """Per slot, the value every estimate uses: NaN where a disturbed trial is left out, so
        that trial i still pairs with trial i of another case."""
        return [math.nan if out else t.value for t, out in zip(self.trials, self.left_out)]

    @property
    def kept(self) -> list[float]:
        """The values every estimate uses, without the gaps (the headline is their median)."""
        return [v for v in self.values if not math.isnan(v)]

    @property
    def controls(self) -> list[float]:
        return [t.control_s for t in self.trials]


class Measurable(Protocol):
    """What a case offers the session."""

    @property
    def key(self) -> str: ...  # identity: the same configuration in two suites is measured once

    @property
    def label(self) -> str: ...

    def measure_trial(
        self,
        profile: Any,
        *,
        trial: int,
        steps_per_round: int | None,
        timeline: Callable[[str], tuple[Any, str]] | None,
        first: bool,
    ) -> TrialResult: ...


# ---------------------------------------------------------------- the session
class TrialSession:
    """Measures cases in ``trials`` interleaved passes; one per pytest session.

    ``unavailable``: exception types that mean "cannot run here" (turned into a skip reason).
    ``progress(text)``: where one line per trial goes (the terminal).
    ``between_passes()``: called before each trial pass, with no workers running (the suites restart
    the forkserver helper there: :func:`dpbench.workers.forkserver.fresh_forkserver` says why);
    ``worker_start``: how workers start, in words, recorded on every case's result.
    ``until_settled``: a :class:`dpbench.measure.settle.Settling`: ``trials`` is then the most
    passes, and after each pass from the design's minimum only the cases still open (and the
    references they are judged against) are measured again, until none is, or the next pass would
    not fit in the budget. None: every case gets ``trials`` trials.
    """

    def __init__(
        self,
        profile: Any,
        trials: int,
        *,
        timeline: Callable[[str], tuple[Any, str]] | None = None,
        trace: Callable[[str], tuple[Any, str]] | None = None,
        unavailable: tuple[type[BaseException], ...] = (),
        progress: Callable[..., None] | None = None,
        between_passes: Callable[[], Any] | None = None,
        worker_start: str | None = None,
        until_settled: Any = None,
    ):
        if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
            raise ValueError(f"trials must be an int >= 1, got {trials!r}")
        self.profile = profile
        self.trials = trials
        self._timeline = timeline
        self._trace = trace  # where traces go when tracing is on (dpbench.measure.tracing); None: off
        self._unavailable = unavailable
        # progress(text) says a line; progress(text, done=k, total=n) is the k+1-th of n schedule slots
        self._progress = progress or (lambda text, **_: None)
        self._between_passes = between_passes
        self.worker_start = worker_start
        self._cases: dict[str, Measurable] = {}
        self.results: dict[str, CaseResult] = {}
        self.schedule: list[tuple[int, str]] = []  # (trial, key) in the order measured
        self.until_settled = until_settled
        self.passes = 0  # trial passes run
        self.claim_looks: int | None = None  # the looks the design splits its level over (None: fixed trials)
        self.stopped: str | None = None  # what ended the trials until settled: settled, maximum, budget
        self.last_look: Any = None  # the last look's findings (dpbench.measure.settle.Look)
        self.trial_seconds: list[float] = []  # wall time of each trial (the budget's estimate)
        self.pass_seconds: list[float] = []  # wall time of each pass (the plan's estimate)
        # The GPUs' draw with nothing running, read once before the trials (dpbench.measure.energy.idle_power);
        # None where the session measured none (CPU).
        self.idle_power: dict[str, Any] | None = None

    def add(self, case: Measurable) -> str:
        """Schedule ``case`` (once, however many suites name it); returns its key."""
        self._cases.setdefault(case.key, case)
        self.results.setdefault(case.key, CaseResult(key=case.key, worker_start=self.worker_start))
        return case.key

    def __len__(self) -> int:
        return len(self._cases)

    def run(self, *, resume: bool = False) -> None:
        """Trial 1 of every case, then trial 2 of every case, … KeyboardInterrupt propagates. Until
        settled, each pass from the design's minimum on measures only the cases still open.
        ``resume``: go on after the passes already run (:meth:`reopened` says whether any case is
        open again), up to the design's maximum."""
        first = self.passes if resume else 0
        order = 1 + max((t.order for r in self.results.values() for t in r.trials), default=-1) if resume else 0
        measured = 0
        if resume:
            self.stopped = None
        keys = list(self._cases)
        active = keys
        started = time.monotonic()
        for trial in range(first, self.trials):
            pass_began = time.monotonic()
            if trial and self.until_settled is not None:
                active = self._still_open(active, trial)
                if not active:
                    break
                if not self._fits(len(active), time.monotonic() - started):
                    self.stopped = "budget"
                    break
            if self._between_passes is not None and self._cases:
                self._between_passes()  # no workers run between passes: each case's trials just ended
            for index, key in enumerate(active):
                case, result = self._cases[key], self.results[key]
                order += 1  # a slot in the schedule, whether or not the case still runs
                if result.skip_reason is not None or result.error is not None:
                    continue  # a case that cannot run, or failed, is not tried again
                # The ETA counts only the slots still to run: a skipped or failed case takes no time.
                left = self._runnable(active[index:]) + (self.trials - trial - 1) * self._runnable(active)
                total = len(active) * self.trials if self.until_settled is None else measured + left
                self._progress(
                    f"trial {trial + 1}/{self.trials} · {order}/{total} · {case.label}",
                    done=measured,
                    total=measured + left,
                )
                began = time.monotonic()
                self._measure(case, result, trial, order - 1)
                self.trial_seconds.append(time.monotonic() - began)
                measured += 1
            self.passes = trial + 1
            self.pass_seconds.append(time.monotonic() - pass_began)
            # Every case runs the first two passes (the design's minimum is above two); the second
            # is warm, so it times the passes to come.
            if trial == 1 and self.until_settled is not None:
                self._progress(
                    self.until_settled.plan_line(
                        cases=len(keys), pass_s=self.pass_seconds[-1], elapsed_s=sum(self.pass_seconds)
                    )
                )
        if self.until_settled is not None:
            self._finish_settling()

    def reopened(self) -> bool:
        """Until settled, after the re-measurement pass left disturbed trials out: does a look at
        the passes run leave a case open that another pass could still settle?"""
        if self.until_settled is None or self.passes >= self.trials:
            return False
        look = self.until_settled.look(self._cases, self.results, self.passes)
        return bool(look.open_keys) and bool(look.unsettled)

    def _still_open(self, active: list[str], trials: int) -> list[str]:
        """The cases of ``active`` the next pass measures: those the look leaves open and the
        references they are judged against. A case once settled stays out, so trial i of every case
        still ran in pass i."""
        # Every case answers its question, the settled ones included: the look judges the whole question.
        look = self.until_settled.look(self._cases, self.results, trials)
        self.last_look = look
        # The design's split from its first pass on: a run the budget stopped before its last look is
        # judged at the same split, so its claims stay within the level (it took fewer looks).
        self.claim_looks = len(self.until_settled.plan.looks)
        references = {
            ref.key for k in look.open_keys if (ref := getattr(self._cases[k], "reference", None)) is not None
        }
        still = [k for k in active if k in look.open_keys or k in references]
        if not still and self.stopped is None:
            # Between looks the open cases are the last look's, so nothing closes before a look; the
            # last look is the maximum.
            self.stopped = "settled" if not look.unsettled else "maximum"
        return still

    def _fits(self, cases: int, elapsed: float) -> bool:
        budget = self.until_settled.budget_s
        return budget is None or elapsed + cases * self._trial_s() <= budget

    def _trial_s(self) -> float:
        return statistics.mean(self.trial_seconds) if self.trial_seconds else 0.0

    def _finish_settling(self) -> None:
        """The last look (after the last pass), the level it allows, and the end line."""
        if self.stopped is None:  # the loop ran every pass: look once more at the maximum
            self._still_open(list(self._cases), self.passes)
            self.stopped = self.stopped or "maximum"
        look = self.last_look
        self.stopped = "settled" if look is not None and not look.unsettled else self.stopped
        self._progress(self.until_settled.end_line(look, why=self.stopped, passes=self.passes, trial_s=self._trial_s()))

    def settled_info(self) -> dict[str, Any]:
        """The design and what ended it, as the run saves it (``machine_info["dpbench"]["until_settled"]``)."""
        settling = self.until_settled
        return {
            **settling.plan.to_dict(),
            "budget_s": settling.budget_s,
            "passes": self.passes,
            "stopped": self.stopped,
            "claim_looks": self.claim_looks,
        }

    def _runnable(self, keys: list[str]) -> int:
        return sum(self.results[k].skip_reason is None and self.results[k].error is None for k in keys)

    def _measure(self, case: Measurable, result: CaseResult, trial: int, order: int) -> None:
        k = result.trials[0].steps_per_round if result.trials else None
        started = time.time()
        try:
            # Only cases that trace are asked to (a case without the keyword still measures).
            tracing = {"trace": self._trace} if self._trace is not None and getattr(case, "traceable", False) else {}
            measured = case.measure_trial(
                self.profile,
                trial=trial,
                steps_per_round=k,
                timeline=self._timeline,
                first=not result.trials,
                **tracing,
            )
        except self._unavailable as exc:
            result.skip_reason = str(getattr(exc, "reason", exc))
            return
        except Exception as exc:  # reported by the case's test, with the worker's traceback
            result.error, result.failed_trial = exc, trial
            return
        measured.trial, measured.order, measured.started_at = trial, order, started
        for warning in (measured.sampler or {}).get("clock_warnings") or []:
            # GPU clocks that float (or throttle) move every number of this trial: say so now.
            self._progress(f"warning: {case.label}, trial {trial + 1}: {warning}")
        if not result.trials:
            result.case_metrics = measured.case_metrics
        result.trials.append(measured)
        self.schedule.append((trial, result.key))

    def measure_again(self, key: str, slot: int, order: int) -> TrialResult:
        """Trial ``slot`` of case ``key`` once more, in fresh workers, without touching its result
        (the re-measurement pass, :mod:`dpbench.measure.remeasure`, decides what to keep). Its
        timeline is recorded beside the first one's; errors propagate."""
        case, result = self._cases[key], self.results[key]
        timeline = None if self._timeline is None else (lambda name: self._timeline(f"{name}-again"))
        self._progress(f"measuring again · trial {slot + 1} · {case.label}")
        started = time.time()
        measured = case.measure_trial(
            self.profile, trial=slot, steps_per_round=result.trials[0].steps_per_round, timeline=timeline, first=False
        )
        measured.trial, measured.order, measured.started_at = slot, order, started
        return measured

    def result(self, key: str) -> CaseResult:
        try:
            return self.results[key]
        except KeyError:
            raise KeyError(f"case {key!r} was not scheduled in this session") from None
