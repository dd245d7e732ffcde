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


def _session(lines: list[str], *, workloads: tuple[str, ...], chosen: bool, device: str = "cpu"):
    from dpbench.measure.plugin.state import start_session
    from dpbench.measure.settings import SessionSettings

    reporter = SimpleNamespace(write_line=lines.append, stats={})
    config = SimpleNamespace(
        stash=pytest.Stash(),
        option=SimpleNamespace(collectonly=False),
        getoption=lambda name, default=None: True if name == "benchmark_disable" else default,
        pluginmanager=SimpleNamespace(get_plugin=lambda name: reporter),
    )
    state = start_session(config)
    state.settings = SessionSettings(workloads=workloads, workloads_chosen=chosen)
    state.profile = SimpleNamespace(device=device, global_batch_for=lambda spec: 64)
    state.progress, state.trials = _Progress(), _Trials()
    return config


@pytest.mark.parametrize(
    ("chosen", "device", "said"),
    [(True, "cpu", True), (False, "cpu", False), (True, "cuda", False)],
    ids=["named-on-cpu", "not-named", "on-cuda"],
)
def test_a_slow_step_is_said_before_the_trials_for_the_workloads_named(monkeypatch, chosen, device, said):
    from dpbench.measure.plugin import session as hooks
    from dpbench.strategies import _metrics
    from dpbench.strategies.step_cost import slow_step_line, step_cost
    from dpbench.workloads import resolve_workload

    monkeypatch.setattr(_metrics, "measure_matmul_flops", lambda: 1e6)  # a machine slow enough for mlp
    monkeypatch.setattr(hooks, "_idle_baseline", lambda config, state: None)  # no GPU to read here
    lines: list[str] = []
    config = _session(lines, workloads=("mlp",), chosen=chosen, device=device)
    hooks.pytest_runtestloop(SimpleNamespace(config=config, items=[]))
    expected = slow_step_line("mlp", step_cost(resolve_workload("mlp"), 64, rate=1e6), 64)
    assert expected is not None and expected.startswith("mlp: a single step is about")
    slow = [line for line in lines if "a single step is about" in line]
    assert slow == ([f"dpbench: {expected}"] if said else [])
    if said:  # before the trials: the line above the one that starts them
        assert lines.index(slow[0]) < next(i for i, line in enumerate(lines) if line.startswith("dpbench: measuring"))
