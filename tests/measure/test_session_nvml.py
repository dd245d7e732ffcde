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
