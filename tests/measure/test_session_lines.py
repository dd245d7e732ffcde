"""The lines a measuring session says in pytest's terminal, each once (the session's hooks driven
with fakes: no worker starts)."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest

BUSY = "the machine was busy during 40% of the trials (12 of 30, 6 of them not measured again): results are unreliable"


class _Trials:
    until_settled = None
    trials = 1

    def __len__(self) -> int:
        return 30

    def run(self, resume: bool = False) -> None:
        pass

    def reopened(self) -> bool:
        return False


class _Progress:
    def end_line(self) -> None:
        pass

    @contextlib.contextmanager
    def warnings_on_own_lines(self):
        yield


def test_a_busy_machine_is_said_once_in_a_session(monkeypatch):
    from dpbench.measure import remeasure
    from dpbench.measure.plugin import session as hooks
    from dpbench.measure.plugin.state import start_session

    lines: list[str] = []
    reporter = SimpleNamespace(write_line=lines.append, stats={})
    config = SimpleNamespace(
        stash=pytest.Stash(),
        option=SimpleNamespace(collectonly=False),
        getoption=lambda name, default=None: default,
        pluginmanager=SimpleNamespace(get_plugin=lambda name: reporter),
    )
    state = start_session(config)
    state.profile, state.progress, state.trials = SimpleNamespace(device="cpu"), _Progress(), _Trials()
    done = SimpleNamespace(disturbed=12, trials=30, measured_again=6, replaced=6, seconds=4.0, busy=BUSY)
    monkeypatch.setattr(remeasure, "remeasure", lambda trials, **_: done)

    hooks.pytest_runtestloop(SimpleNamespace(config=config, items=[]))  # measures, then re-measures
    hooks.pytest_terminal_summary(reporter, 0, config)
    assert [line for line in lines if "busy" in line] == [f"dpbench: {BUSY}"]
    assert lines[-1] == f"dpbench: {BUSY}"  # in the summary: above the tables, the last of pytest's lines here
