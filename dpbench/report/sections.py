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

import multiprocessing
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import matplotlib
import pandas as pd

from dpbench.decision.text import level_line
from dpbench.predict.text import PICK_LINE
from dpbench.report import convergence, plots, plots_resources
from dpbench.report.comparison import comparison_tables
from dpbench.report.data import PartBuilder, ReportData
from dpbench.report.decision import decisions
from dpbench.report.figures import Part, strategy_color
from dpbench.report.machines import machines_view
from dpbench.report.predicted import forecast_blocks
from dpbench.report.traces import OPEN_OFFLINE, build_traces

__all__ = [
    "FIGURES",
    "PARTS",
    "SECTIONS",
    "Section",
    "build_sections",
    "default_workers",
    "figure_section",
]


@dataclass(kw_only=True)
class Section:
    key: str  # its HTML id
    title: str
    template: str = "parts.html.j2"
    description: str = ""
    parts: list[Part] = field(default_factory=list)
    data: Any = None  # what a section's own template reads


def figure_section(
    key: str, title: str, builders: Sequence[PartBuilder], description: str = ""
) -> Callable[[ReportData], Section | None]:
    """A section of figures: each builder gets every configuration of every run."""

    def build(data: ReportData) -> Section | None:
        parts = [part for builder in builders if (part := data.part(builder)) is not None]
        return Section(key=key, title=title, parts=parts, description=description) if parts else None

    build.__name__ = f"section_{key}"
    return build


def decision_section(data: ReportData) -> Section:
    level = level_line(data.decided())
    return Section(
        key="decision",
        title="Decision view",
        template="decision.html.j2",
        description=(
            f"{level[0].upper()}{level[1:]}. Per question — a workload at one "
            "recipe (optimizer, precision, global batch), on its newest run — the answer, then each configuration "
            "against single (blue faster, red slower; framed: a claim); every claim is listed under it."
        ),
        data=decisions(data.configs, data.runs, data.judged(), decision=data.decided()),
    )


def predicted_section(data: ReportData) -> Section | None:
    """Each run's forecast at the world sizes asked for (``--predict-world-sizes``): templates/predicted.html.j2."""
    if not data.forecasts:
        return None
    return Section(
        key="predicted",
        title="Predicted at other world sizes",
        template="predicted.html.j2",
        description=(
            "Each run's ddp, fsdp, zero and allreduce configurations replayed against the collective model at "
            "the world sizes asked for, as dpbench predict prints them: the predicted step with its 95% interval, "
            "samples/s, scaling efficiency, exposed communication and memory per rank, and the run's own "
            "measurement with the error where it measured that world size; then the fastest predicted "
            "configuration per world size, and what the predictions rest on. A prediction, not a measurement: "
            "the decision above is the measured answer."
        ),
        data={"blocks": forecast_blocks(data.runs, data.forecasts), "pick_line": PICK_LINE},
    )


def convergence_section(data: ReportData) -> Section | None:
    """The convergence suite's "Time to accuracy" (issue 21): its own rows, one per benchmark."""
    frame = data.frame
    rows = frame[frame["suite"] == "convergence"] if "suite" in frame else frame.iloc[0:0]
    part = convergence.time_to_accuracy(rows, data.runs) if len(rows) else None
    return Section(key="convergence", title="Time to accuracy", parts=[part]) if part is not None else None


def traces_section(data: ReportData) -> Section | None:
    """Traced cases (``--dpbench-trace``): the breakdown per rank, skew and files (templates/_traces.html.j2)."""
    traces = build_traces(data.frame)
    return (
        Section(
            key="traces",
            title="Traces: why is it slow",
            template="_traces.html.j2",
            description=OPEN_OFFLINE,
            data=traces,
        )
        if traces
        else None
    )


def comparison_section(data: ReportData) -> Section | None:
    if not data.judged():
        return None
    return Section(
        key="comparison",
        title="Run comparison",
        template="comparison.html.j2",
        data=comparison_tables(data.judged(), data.configs),
    )


def machines_section(data: ReportData) -> Section | None:
    """Runs of different machines as labelled columns (not gated): templates/machines.html.j2."""
    view = machines_view(data.frame, data.configs, data.runs)
    if view is None:
        return None
    return Section(key="machines", title="Machines side by side", template="machines.html.j2", data=view)


PARTS: list[PartBuilder] = [
    plots.throughput,
    plots.scaling,
    plots.step_times,
    plots_resources.phases,
    plots_resources.memory,
    plots_resources.timelines,
    plots.busbw,
    plots.headline,
]

SECTIONS: list[Callable[[ReportData], Section | None]] = [
    decision_section,
    predicted_section,
    comparison_section,
    machines_section,
    figure_section("throughput", "Throughput and scaling", [plots.throughput, plots.scaling]),
    figure_section("step-times", "Step times", [plots.step_times]),
    figure_section(
        "resources",
        "Phases, memory and utilization",
        [plots_resources.phases, plots_resources.memory, plots_resources.timelines],
    ),
    figure_section("communication", "Communication", [plots.busbw]),
    convergence_section,
    traces_section,
    figure_section("numbers", "All numbers", [plots.headline]),
]


def build_sections(
    data: ReportData,
    sections: Sequence[Callable[[ReportData], Section | None]] = SECTIONS,
    *,
    workers: int | None = None,
) -> list[Section]:
    """Every section that has something to show, in order.

    The figures are drawn by ``workers`` forked processes (default: the CPUs this process may
    use, at most 4) while this one builds the rest of the page: matplotlib's drawing is most of a
    report's time and each figure is independent of the others. The page is the same byte for
    byte whatever ``workers`` is (tests/report/test_report_parallel.py)."""
    # Strings from results files reach matplotlib as labels: never let "$...$" in a benchmark
    # name be parsed as mathtext (it can fail to parse and abort the report).
    with matplotlib.rc_context(
        {
            "text.parse_math": False,
            "axes.grid": True,
            "grid.color": "#e5e5e5",
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.axisbelow": True,
        }
    ):
        _fix_colours(data.configs)
        with _FiguresAhead(data, default_workers() if workers is None else workers):
            return [section for build in sections if (section := build(data)) is not None]


# The figure builders, slowest first (measured on a 2-run report of ~70 benchmarks), so that the
# pool's first-come order balances its workers.
FIGURES: list[PartBuilder] = [
    plots.step_times,
    plots_resources.phases,
    plots.throughput,
    plots_resources.timelines,
    plots_resources.memory,
    plots.scaling,
    plots.busbw,
]
_SHARED: ReportData | None = None  # what forked workers read (the fork copied it; nothing is pickled)


def default_workers() -> int:
    """The CPUs this process may run on (its affinity, not the machine's count), at most 4."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(4, cpus))


def _fix_colours(configs: pd.DataFrame) -> None:
    """Give every strategy (and collective) its colour now, in the page's order: an unknown name
    gets the next free colour when first seen, and a worker would otherwise see names in another
    order than the page does."""
    for column in ("strategy", "collective"):
        if column in configs:
            for name in configs[column]:
                if isinstance(name, str) and name:
                    strategy_color(name)


def _draw(index: int) -> Part | None:
    return FIGURES[index](_SHARED.configs, _SHARED.runs)


class _FiguresAhead:
    """While open, a pool of forked workers draws the figures and ``data.ahead`` holds their futures.

    Serial (nothing ahead) with one worker, without ``fork`` (macOS, Windows), or when this
    process runs other threads (a fork copies their locks in whatever state they are in). The
    workers read ``data`` from the memory the fork copied; only the finished parts (SVG text,
    table cells) travel back. A worker that died leaves its figure to be drawn in this process."""

    def __init__(self, data: ReportData, workers: int):
        self.data, self.workers, self.pool = data, workers, None

    def __enter__(self):
        global _SHARED
        if (
            self.workers < 2
            or "fork" not in multiprocessing.get_all_start_methods()
            or threading.active_count() > 1
            or _SHARED is not None
        ):
            return self
        _SHARED = self.data
        # Python 3.11+ forks every worker of a fork pool before the pool starts its own threads.
        self.pool = ProcessPoolExecutor(
            max_workers=min(self.workers, len(FIGURES)), mp_context=multiprocessing.get_context("fork")
        )
        self.data.ahead = {builder: self.pool.submit(_draw, i) for i, builder in enumerate(FIGURES)}
        return self

    def __exit__(self, *exc):
        global _SHARED
        self.data.ahead = {}
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            _SHARED = None
        return False
