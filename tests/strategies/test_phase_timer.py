"""PhaseTimer: host clock on CPU; on CUDA, events read after the timed work — never a sync inside it."""

from __future__ import annotations

import time

import pytest
import torch

from dpbench.strategies._timing import PhaseTimer


def test_cpu_phases_are_host_time_and_accumulate():
    timer = PhaseTimer([])
    for _ in range(2):
        with timer("compute"):
            time.sleep(0.01)
    with timer("optimizer"):
        pass
    totals = timer.resolve()
    assert set(totals) == {"compute", "optimizer"}
    assert 0.02 <= totals["compute"] < 0.5 and 0 <= totals["optimizer"] < totals["compute"]
    timer.clear()
    assert timer.resolve() == {}


def test_spans_from_dataparallel_marks_are_merged():
    from dpbench.parallel import DataParallel

    timer = PhaseTimer([])
    with DataParallel(torch.nn.Linear(4, 2), ["cpu", "cpu"], record_phases=True) as dp:
        dp(torch.randn(6, 4))
        timer.add_spans(dp.phase_spans)
        expected = dp.phase_times
    totals = timer.resolve()
    assert set(totals) == {"scatter", "replicate", "apply", "gather"}
    assert totals == pytest.approx(expected)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_phases_record_events_without_synchronising(monkeypatch):
    timer = PhaseTimer(["cuda:0"])
    a = torch.randn(2048, 2048, device="cuda:0")
    torch.cuda.synchronize()
    calls = []
    real = torch.cuda.synchronize
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args: calls.append(args) or real(*args))
    with timer("compute"):
        for _ in range(20):
            a = a @ a / 2048
    with timer("other"):
        b = a + 1
    assert calls == []  # nothing waited for the device inside the phases
    totals = timer.resolve()  # waits for the end events, after the work
    assert totals["compute"] > totals["other"] > 0
    del b
