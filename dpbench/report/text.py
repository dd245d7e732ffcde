"""The decision at the end of a suite session, and for ``dpbench report``: per workload, the
headline of each question and each configuration against its leader (:mod:`dpbench.decision.text`).

A pytest plugin of its own (the ``pytest11`` entry point ``dpbench-decision``): the measuring
plugin lives below the report and never imports it, so the report hooks into the session itself,
reads the run the session just saved and prints the decision under pytest-benchmark's table.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from dpbench.decision.model import Decision

__all__ = ["TERMINAL_LINES", "decision_of", "decision_text", "pytest_sessionstart", "pytest_terminal_summary"]

TERMINAL_LINES = 22  # the decision's lines at most, so that it fits the last screen with the paths around it

# This plugin's own state on the config: the run files that existed when a measuring session started.
_RUNS_BEFORE = pytest.StashKey[set[Path]]()


def decision_of(files: Sequence[str | Path]) -> Decision:
    """The decision model of saved run files (:mod:`dpbench.decision`): what every view renders."""
    from dpbench.report.data import report_data
    from dpbench.results.frame import runs_frame
    from dpbench.results.load import read_run

    return report_data(runs_frame([read_run(p) for p in files])).decided()


def decision_text(
    files: Sequence[str | Path] = (), *, decision: Decision | None = None, max_lines: int | None = None
) -> str:
    """The terminal's decision over saved run files ('' when none of them trains a workload); the
    headlines alone where every row would take more than ``max_lines``."""
    from dpbench.decision.text import summary_lines

    lines = summary_lines(decision if decision is not None else decision_of(files), max_lines=max_lines)
    return "\n".join(lines) + "\n" if lines else ""


def _saved(config: Any) -> set[Path]:
    from dpbench.measure.plugin.storage import RUN_GLOB, storage_dir

    where = storage_dir(config)
    return set(where.glob(RUN_GLOB)) if where and where.exists() else set()


def pytest_sessionstart(session: Any) -> None:
    from dpbench.measure.plugin import measuring_session

    state = measuring_session(session.config)
    if state is not None and state.trials is not None:  # a measuring session
        session.config.stash[_RUNS_BEFORE] = _saved(session.config)


@pytest.hookimpl(trylast=True)  # under pytest-benchmark's table and the measuring plugin's note
def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: Any) -> None:
    from dpbench.measure.plugin import session_of

    before = config.stash.get(_RUNS_BEFORE, None)
    if before is None or not len(session_of(config).trials):
        return  # not a measuring session, or one with nothing to measure
    new = sorted(_saved(config) - before)
    if not new:
        return  # nothing saved (--benchmark-disable, no --benchmark-save, interrupted)
    try:
        text = decision_text(new[-1:], max_lines=TERMINAL_LINES)
    except Exception as exc:  # the summary is a courtesy: the run is saved whatever happens here
        terminalreporter.write_line(f"dpbench: no decision summary ({type(exc).__name__}: {exc})")
        return
    if text:
        terminalreporter.write_sep("-", "dpbench: the decision (dpbench report renders it with plots)")
        terminalreporter.write(text)
