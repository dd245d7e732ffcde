"""The report's "Predicted at other world sizes" section: each run's
:class:`~dpbench.predict.StepForecast` (what ``dpbench predict RUN`` prints) as one block per run,
one table per workload. The cells and the lines under them are ``dpbench predict``'s own
(:mod:`dpbench.predict.text`): the section computes no number of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dpbench.predict.forecast import StepForecast
from dpbench.predict.text import basis_lines, by_workload, heading, prediction_cells
from dpbench.report.figures import Table

__all__ = ["COLUMNS", "ForecastBlock", "WorkloadForecast", "forecast_blocks"]

COLUMNS = [
    "configuration",
    "ranks",
    "step",
    "95% interval",
    "samples/s",
    "scaling efficiency",
    "exposed communication",
    "memory/rank",
    "measured step",
    "error",
]
"""The table's columns: ``dpbench predict``'s (:data:`~dpbench.predict.text.STEP_COLUMNS`), spelled out."""


@dataclass(kw_only=True, frozen=True)
class WorkloadForecast:
    """One workload's predictions and picks."""

    workload: str
    """The workload spec."""
    table: Table
    """One row per configuration × world size, by world size, then fastest first."""
    picks: tuple[str, ...]
    """The pick at each world size, with "sure" or what it overlaps."""


@dataclass(kw_only=True, frozen=True)
class ForecastBlock:
    """One run's forecast, or why it has none."""

    run: str
    """The run's name on the page."""
    heading: str
    """What was predicted from, and how it scales (empty when nothing was)."""
    workloads: tuple[WorkloadForecast, ...] = ()
    """Per workload, by name."""
    basis: tuple[str, ...] = ()
    """What the predictions rest on: the overlap slowdown's origin, the profiles, memory, the notes."""


def forecast_blocks(runs: Sequence[str], forecasts: Sequence[StepForecast | None]) -> list[ForecastBlock]:
    """One block per run, ``forecasts`` in the order of ``runs`` (None: a run with nothing to predict from)."""
    blocks = []
    for run, forecast in zip(runs, forecasts):
        if forecast is None:
            blocks.append(
                ForecastBlock(run=run, heading="nothing to predict from: no ddp, fsdp, zero or allreduce training case")
            )
            continue
        workloads = tuple(
            WorkloadForecast(
                workload=workload,
                table=Table(columns=COLUMNS, rows=[list(prediction_cells(p)) for p in predictions], sortable=False),
                picks=tuple(k.sentence() for k in forecast.picks if k.workload == workload),
            )
            for workload, predictions in by_workload(forecast)
        )
        blocks.append(
            ForecastBlock(run=run, heading=heading(forecast), workloads=workloads, basis=tuple(basis_lines(forecast)))
        )
    return blocks
