"""On CUDA the measuring session holds one NVML handle open from its start to its end, so a GPU
without persistence mode stays initialised between the fresh-process trials."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from dpbench.measure.plugin import session, session_of
from dpbench.measure.plugin.state import start_session


class FakeNvml:
    class NVMLError(Exception):
        pass

    def __init__(self, fail: bool = False):
        self.calls: list[str] = []
        self.fail = fail

    def nvmlInit(self):
        self.calls.append("init")
        if self.fail:
            raise self.NVMLError("Driver Not Loaded")

    def nvmlShutdown(self):
        self.calls.append("shutdown")


def _config(device: str):
    config = SimpleNamespace(stash=pytest.Stash())
    start_session(config).profile = SimpleNamespace(device=device)
    return config


def test_a_cuda_session_holds_nvml_from_start_to_end(monkeypatch):
    nvml = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    config = _config("cuda")
    session.pytest_sessionstart(SimpleNamespace(config=config))
    assert nvml.calls == ["init"] and session_of(config).nvml is nvml
    monkeypatch.setattr(session.signals, "restore", lambda config: None)
    session.pytest_unconfigure(config)
    assert nvml.calls == ["init", "shutdown"] and session_of(config).nvml is None


def test_a_cpu_session_or_a_missing_driver_holds_nothing(monkeypatch):
    nvml = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    config = _config("cpu")
    session.pytest_sessionstart(SimpleNamespace(config=config))
    assert nvml.calls == [] and session_of(config).nvml is None
    broken = FakeNvml(fail=True)
    monkeypatch.setitem(sys.modules, "pynvml", broken)
    assert session._hold_nvml() is None and broken.calls == ["init"]


def test_a_cuda_session_reads_the_gpus_idle_draw_once_and_says_it(monkeypatch):
    asked = []

    def idle_power(*, seconds, devices=None, nvml=None):
        asked.append(seconds)
        return {"devices": {"cuda:0": {"w": 61.4, "absent": None}}, "window_s": seconds, "absent": None}

    monkeypatch.setattr("dpbench.measure.energy.idle_power", idle_power)
    said = []
    monkeypatch.setattr(session, "say", lambda config, text, progress=None: said.append(text))
    config = _config("cuda")
    state = session_of(config)
    state.trials = SimpleNamespace(idle_power=None)
    session._idle_baseline(config, state)
    # 2.5 s: the energy counter's 2 s window with the rounds' margin (dpbench.measure.cases.GPU_WINDOW_MARGIN).
    assert asked == [2.5] and state.trials.idle_power["devices"]["cuda:0"]["w"] == 61.4
    assert said == ["idle GPU draw over 2.5 s before the trials: cuda:0 61 W"]


def test_the_idle_line_says_why_a_draw_is_absent():
    from dpbench.measure.plugin.text import idle_line

    short = {"w": None, "absent": "short_window", "window_s": 0.3, "needed_s": 2.0}
    idle = {"devices": {"cuda:0": {"w": 58.0, "absent": None}, "cuda:1": short}, "window_s": 2.5, "absent": None}
    assert idle_line(idle) == (
        "idle GPU draw over 2.5 s before the trials: cuda:0 58 W, "
        "cuda:1 absent (a 0.30 s window, shorter than the 2.0 s the energy counter needs)"
    )
    assert idle_line({"devices": {}, "window_s": None, "absent": "no_counter"}) == (
        "no idle GPU draw: no readable energy counter (a CPU run, or NVML reads none on this GPU)"
    )
