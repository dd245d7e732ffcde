"""The page's sections, in order: a plain list of builders, one line each.

A builder takes the :class:`ReportData` (the tidy frame, one row per configuration, the run
names, the gate's comparisons) and returns a :class:`Section`, or None when the runs hold
nothing it shows. A section is rendered by its ``template`` (``parts.html.j2``: figures, each
with its numbers folded under it). A new section is one function and one line in
:data:`SECTIONS`.

Figures are made once per kind for the whole page (not once per suite): a configuration several
suites published is one measurement and one row, its suites listed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import matplotlib
import pandas as pd

from dpbench.gate.compare import compare_frames
from dpbench.report import convergence, plots, plots_resources
from dpbench.report.comparison import comparison_tables
from dpbench.report.configs import configurations
from dpbench.report.decision import RunComparison, decisions
from dpbench.report.figures import Part
from dpbench.report.summary import run_warnings
from dpbench.report.traces import OPEN_OFFLINE, build_traces
from dpbench.results.load import ResultsError

__all__ = ["PARTS", "ReportData", "SECTIONS", "Section", "build_sections", "compare_with_first", "figure_section",
           "report_data"]


@dataclass(kw_only=True)
class ReportData:
    frame: pd.DataFrame  # one row per benchmark per run (dpbench.results.frame)
    configs: pd.DataFrame  # one row per configuration per run (dpbench.report.configs), ``case`` its name
    runs: list[str]
    comparisons: list[RunComparison] = field(default_factory=list)  # each later run against the first
    warnings: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class Section:
    key: str  # its HTML id
    title: str
    template: str = "parts.html.j2"
    description: str = ""
    parts: list[Part] = field(default_factory=list)
    data: Any = None  # what a section's own template reads


PartBuilder = Callable[[pd.DataFrame, list[str]], "Part | None"]


def figure_section(key: str, title: str, builders: Sequence[PartBuilder],
                   description: str = "") -> Callable[[ReportData], Section | None]:
    """A section of figures: each builder gets every configuration of every run."""
    def build(data: ReportData) -> Section | None:
        parts = [part for builder in builders if (part := builder(data.configs, data.runs)) is not None]
        return Section(key=key, title=title, parts=parts, description=description) if parts else None
    build.__name__ = f"section_{key}"
    return build


def decision_section(data: ReportData) -> Section:
    return Section(key="decision", title="Decision view", template="decision.html.j2",
                   data=decisions(data.configs, data.runs, data.comparisons))


def convergence_section(data: ReportData) -> Section | None:
    """The convergence suite's "Time to accuracy" (issue 21): its own rows, one per benchmark."""
    frame = data.frame
    rows = frame[frame["suite"] == "convergence"] if "suite" in frame else frame.iloc[0:0]
    part = convergence.time_to_accuracy(rows, data.runs) if len(rows) else None
    return Section(key="convergence", title="Time to accuracy", parts=[part]) if part is not None else None


def traces_section(data: ReportData) -> Section | None:
    """Traced cases (``--dpbench-trace``): the breakdown per rank, skew and files (templates/_traces.html.j2)."""
    traces = build_traces(data.frame)
    return Section(key="traces", title="Traces: why is it slow", template="_traces.html.j2",
                   description=OPEN_OFFLINE, data=traces) if traces else None


def comparison_section(data: ReportData) -> Section | None:
    if not data.comparisons:
        return None
    return Section(key="comparison", title="Run comparison", template="comparison.html.j2",
                   data=comparison_tables(data.comparisons, data.configs))


PARTS: list[PartBuilder] = [
    plots.throughput, plots.scaling, plots.step_times, plots_resources.phases, plots_resources.memory,
    plots_resources.timelines, plots.busbw, plots.headline,
]

SECTIONS: list[Callable[[ReportData], Section | None]] = [
    decision_section,
    comparison_section,
    figure_section("throughput", "Throughput and scaling", [plots.throughput, plots.scaling]),
    figure_section("step-times", "Step times", [plots.step_times]),
    figure_section("resources", "Phases, memory and utilization",
                   [plots_resources.phases, plots_resources.memory, plots_resources.timelines]),
    figure_section("communication", "Communication", [plots.busbw]),
    convergence_section,
    traces_section,
    figure_section("numbers", "All numbers", [plots.headline]),
]


def compare_with_first(frame: pd.DataFrame, runs: Sequence[str]) -> list[RunComparison]:
    """Each later run against the first, through the gate's own code, defaults and verdicts, so
    the page says what ``dpbench compare`` would say."""
    out = []
    base = frame[frame["run"] == runs[0]]
    for other in runs[1:]:
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
    return ReportData(frame=frame, configs=configs.assign(case=configs["config"]), runs=runs,
                      comparisons=compare_with_first(frame, runs) if len(runs) > 1 else [],
                      warnings=run_warnings(frame))


def build_sections(data: ReportData, sections: Sequence[Callable[[ReportData], Section | None]] = SECTIONS
                   ) -> list[Section]:
    """Every section that has something to show, in order."""
    # Strings from results files reach matplotlib as labels: never let "$...$" in a benchmark
    # name be parsed as mathtext (it can fail to parse and abort the report).
    with matplotlib.rc_context({"text.parse_math": False, "axes.grid": True, "grid.color": "#e5e5e5",
                                "axes.spines.top": False, "axes.spines.right": False, "axes.axisbelow": True}):
        return [section for build in sections if (section := build(data)) is not None]
