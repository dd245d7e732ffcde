"""What a report is built from (:class:`ReportData`): the tidy frame, one row per configuration,
the run names, and the decision computed once from them — and nothing that draws.

The terminal's decision at the end of every suite session (:mod:`dpbench.report.text`) reads the
same :meth:`ReportData.decided` as the page, without importing matplotlib and the figures (about
half a second of each session's end); the page's sections (:mod:`dpbench.report.sections`) add
the figures, drawn ahead by worker processes into :attr:`ReportData.ahead`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pandas as pd

from dpbench.decision.configs import configurations
from dpbench.decision.model import Decision
from dpbench.decision.questions import decide
from dpbench.report.run_notes import run_warnings, trial_notes

if TYPE_CHECKING:
    from dpbench.predict.forecast import StepForecast
    from dpbench.report.decision import RunComparison
    from dpbench.report.figures import Part

__all__ = ["PartBuilder", "ReportData", "compare_with_first", "report_data"]

PartBuilder = Callable[[pd.DataFrame, list[str]], "Part | None"]


@dataclass(kw_only=True)
class ReportData:
    frame: pd.DataFrame  # one row per benchmark per run (dpbench.results.frame)
    configs: pd.DataFrame  # one row per configuration per run (dpbench.decision.configs), ``case`` its name
    runs: list[str]
    # Each later run against the first; None until asked for (judged while the figures are drawn).
    comparisons: list[RunComparison] | None = None
    warnings: list[str] = field(default_factory=list)
    # Per run with disturbed trials: one counting line and the per-trial lines behind it (folded).
    trial_notes: list[tuple[str, list[str]]] = field(default_factory=list)
    # Figure parts being drawn ahead in worker processes (see build_sections), by builder.
    ahead: dict[Callable, Future] = field(default_factory=dict)
    # The answer of every question (dpbench.decision), computed once when first asked for.
    decision: Decision | None = None
    # Per run (in the order of ``runs``), its forecast at other world sizes (dpbench.predict), or None
    # where it has nothing to predict from; empty: none was asked for (no section).
    forecasts: list[StepForecast | None] = field(default_factory=list)

    def decided(self) -> Decision:
        """The decision model of these runs: every view renders this one object."""
        if self.decision is None:
            from dpbench.results.fingerprint import departures

            # A configuration whose fingerprint departs from single's is never ranked, and says why.
            self.decision = decide(self.configs, self.runs, departures=departures(self.configs))
        return self.decision

    def judged(self) -> list[RunComparison]:
        """Each later run against the first, by the gate (computed once, when first asked for)."""
        if self.comparisons is None:
            self.comparisons = compare_with_first(self.frame, self.runs) if len(self.runs) > 1 else []
        return self.comparisons

    def part(self, builder: PartBuilder) -> Part | None:
        """What ``builder`` makes of every configuration: drawn ahead by a worker, or here."""
        future = self.ahead.get(builder)
        if future is not None:
            try:
                return future.result()  # a worker's exception is raised here, as a serial build raises it
            except BrokenProcessPool:  # the worker died (killed, out of memory): draw it here
                pass
        return builder(self.configs, self.runs)


def compare_with_first(frame: pd.DataFrame, runs: Sequence[str]) -> list[RunComparison]:
    """Each later run against the first, through the gate's own code, defaults and verdicts, so
    the page says what ``dpbench compare`` would say."""
    from dpbench.gate.compare import compare_frames
    from dpbench.report.decision import RunComparison
    from dpbench.report.machines import hardware_difference
    from dpbench.results.load import ResultsError

    out = []
    base = frame[frame["run"] == runs[0]]
    for other in runs[1:]:
        moved = hardware_difference(frame, runs[0], other)
        if moved is not None:
            # The gate compares one machine's runs: another machine is a ratio to read, not a verdict.
            note = f"runs of different machines ({moved}): not judged; see Machines side by side"
            out.append(RunComparison(baseline=runs[0], candidate=other, note=note))
            continue
        try:
            cmp = compare_frames(base, frame[frame["run"] == other], baseline_name=runs[0], candidate_name=other)
        except ResultsError as e:
            out.append(RunComparison(baseline=runs[0], candidate=other, note=str(e)))
            continue
        out.append(RunComparison(baseline=runs[0], candidate=other, comparison=cmp))
    return out


def report_data(frame: pd.DataFrame) -> ReportData:
    """Everything the sections read, from the tidy frame of :func:`dpbench.results.frame.runs_frame`."""
    runs = [str(r) for r in dict.fromkeys(frame["run"])]
    configs = configurations(frame)
    return ReportData(
        frame=frame,
        configs=configs.assign(case=configs["config"]),
        runs=runs,
        warnings=run_warnings(frame),
        trial_notes=trial_notes(frame),
    )
