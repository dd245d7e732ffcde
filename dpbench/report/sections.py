"""One report section per suite, each made of the parts that apply to its benchmarks.

A figure never mixes suites: the same workload in the throughput and the scaling suite was
measured at different batches and means different things.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

import matplotlib
import pandas as pd
import seaborn as sns

from dpbench.report import convergence, plots, plots_resources
from dpbench.report.figures import Part

__all__ = ["PARTS", "Section", "build_sections"]

PARTS: list[Callable[[pd.DataFrame, list[str]], Part | None]] = [
    plots.headline, plots.throughput, plots.scaling, plots.step_times, plots_resources.phases,
    plots_resources.memory, plots_resources.timelines, plots.busbw,
    convergence.time_to_accuracy,  # issue 21: the convergence suite's "Time to accuracy" (None elsewhere)
]
OTHER = "other benchmarks"  # benchmarks without a suite (plain pytest-benchmark files)


@dataclass(kw_only=True)
class Section:
    key: str  # an HTML id: "suite-throughput"
    suite: str
    title: str
    parts: list[Part] = field(default_factory=list)


def _key(suite: str, taken: set[str]) -> str:
    base = "suite-" + (re.sub(r"[^A-Za-z0-9_-]+", "-", suite).strip("-") or "x")
    key, i = base, 2
    while key in taken:
        key, i = f"{base}-{i}", i + 1
    taken.add(key)
    return key


def build_sections(frame: pd.DataFrame) -> list[Section]:
    """Every suite's section for ``frame`` (the output of :func:`dpbench.report.load_runs`)."""
    runs = [str(r) for r in dict.fromkeys(frame["run"])]
    suite_of = frame["suite"].where(frame["suite"].map(lambda v: isinstance(v, str) and v != ""), OTHER)
    sections, taken = [], set()
    # Strings from results files reach matplotlib as labels: never let "$...$" in a benchmark
    # name be parsed as mathtext (it can fail to parse and abort the report).
    with sns.axes_style("whitegrid"), matplotlib.rc_context({"text.parse_math": False}):
        for suite in dict.fromkeys(suite_of):
            rows = frame[suite_of == suite]
            # Inside its suite's section a case needs no "[suite]" to tell it from the same case elsewhere.
            rows = rows.assign(case=[str(label).removesuffix(f" [{suite}]") for label in rows["label"]])
            parts = [part for build in PARTS if (part := build(rows, runs)) is not None]
            sections.append(Section(key=_key(str(suite), taken), suite=str(suite),
                                    title=f"Suite: {suite}", parts=parts))
    return sections
