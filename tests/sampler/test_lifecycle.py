"""Start/stop, context manager, concurrent samplers, bad input, summary and saved timeline."""

from __future__ import annotations

import gc
import json
import math
import os
import threading
import time

import pandas as pd
import pytest

from dpbench.sampler import MARK_DEVICE, TIMELINE_COLUMNS, ResourceSampler, read_timeline


def _sampler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "dpbench-sampler"]


@pytest.fixture(autouse=True)
def _no_thread_left_behind():
    before = set(_sampler_threads())
    yield
    deadline = time.monotonic() + 5
    while set(_sampler_threads()) - before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not set(_sampler_threads()) - before, "a sampling thread outlived its test"


# -- bad input -----------------------------------------------------------------------------------
@pytest.mark.parametrize("interval", [0, -0.5, math.nan, math.inf, "0.1", True, None])
def test_interval_must_be_a_positive_number(interval):
    with pytest.raises(ValueError, match=r"interval: expected a positive number of seconds, found"):
        ResourceSampler(interval, backend="cpu")


def test_backend_name_is_checked():
    with pytest.raises(ValueError, match=r"backend: expected one of 'auto', 'nvml', 'cpu', found 'gpu'"):
        ResourceSampler(backend="gpu")


@pytest.mark.parametrize(
    "pids, error, match",
    [
        ([0], ValueError, "positive int process ids, found 0"),
        (["12"], ValueError, "positive int process ids, found '12'"),
        ([True], ValueError, "found True"),
        # Its id does not carry the pid: every pytest-xdist worker must collect the same test ids.
        pytest.param(os.getpid(), TypeError, "expected a list of process ids", id="bare-pid"),
        ([2**22 + 12345], ValueError, r"no running process with pid 4206649"),
    ],
)
def test_pids_are_checked(pids, error, match):
    with pytest.raises(error, match=match):
        ResourceSampler(pids=pids, backend="cpu")


def test_mark_needs_a_running_sampler_and_a_label():
    sampler = ResourceSampler(0.02, backend="cpu")
    with pytest.raises(RuntimeError, match="not running"):
        sampler.mark("early")
    with sampler:
        for bad in ("", None, 3):
            with pytest.raises(ValueError, match="mark: expected a non-empty str label"):
                sampler.mark(bad)
        sampler.mark("ok")
    with pytest.raises(RuntimeError, match="not running"):
        sampler.mark("late")
    assert list(sampler.marks().mark) == ["ok"]


# -- lifecycle -------------------------------------------------------------------------------------
def test_exception_in_with_block_stops_the_thread_and_propagates():
    sampler = ResourceSampler(0.02, backend="cpu")
    with pytest.raises(KeyError, match="boom"):
        with sampler:
            time.sleep(0.06)
            raise KeyError("boom")
    assert not sampler.running and not sampler.sampling and not _sampler_threads()
    assert sampler.summary()["sample_count"] >= 2


def test_start_stop_twice_records_afresh_and_stop_is_idempotent():
    sampler = ResourceSampler(0.02, backend="cpu")
    sampler.stop()  # never started: nothing to do
    first_start = time.perf_counter()
    sampler.start()
    with pytest.raises(RuntimeError, match="already running"):
        sampler.start()
    sampler.mark("first run")
    time.sleep(0.1)
    sampler.stop()
    sampler.stop()
    first = sampler.summary()
    since_first = time.perf_counter() - first_start
    sampler.start()
    time.sleep(0.15)
    sampler.stop()
    second = sampler.summary()
    assert first["sample_count"] >= 3 and second["sample_count"] >= 3
    assert second["mark_count"] == 0  # a new recording, not an append
    # Its clock starts again at zero: a clock kept from the first recording would put every sample
    # at least `since_first` in. (Its first sample lands later than 0 when the thread starts late.)
    assert sampler.frame().time.min() < since_first
    assert second["duration_s"] > first["duration_s"]


def test_two_samplers_at_once_are_independent():
    a = ResourceSampler(0.02, pids=[os.getpid()], backend="cpu")
    b = ResourceSampler(0.03, backend="cpu")
    with a:
        with b:
            assert len(_sampler_threads()) >= 2
            time.sleep(0.3)
    fa, fb = a.frame(), b.frame()
    # Each has its own thread, clock and CPU-time baseline: both produce their own samples
    # at their own rate, with real percentages.
    for frame in (fa, fb):
        cpu = frame[frame.device == "cpu"].cpu_pct.dropna()
        assert len(cpu) >= 5 and cpu.between(0, 100).all()
    assert a.summary()["achieved_interval_mean"] == pytest.approx(0.02, rel=0.4)
    assert b.summary()["achieved_interval_mean"] == pytest.approx(0.03, rel=0.4)
    assert set(fb.device) == {"cpu"} and f"pid:{os.getpid()}" in set(fa.device)


def test_a_forgotten_sampler_stops_its_thread_when_collected():
    sampler = ResourceSampler(0.02, backend="cpu").start()
    (thread,) = _sampler_threads()
    del sampler
    gc.collect()
    thread.join(2)
    assert not thread.is_alive()


def test_frame_can_be_read_while_running():
    with ResourceSampler(0.02, backend="cpu") as sampler:
        time.sleep(0.1)
        early = len(sampler.frame())
        time.sleep(0.1)
        assert len(sampler.frame()) > early
        assert sampler.summary()["sample_count"] >= 5


# -- summary and timeline file ------------------------------------------------------------------------
def test_summary_is_plain_json():
    with ResourceSampler(0.02, pids=[os.getpid()], backend="cpu") as sampler:
        time.sleep(0.1)
    summary = sampler.summary()
    text = json.dumps(summary, allow_nan=False)  # NaN would raise: it must be None
    assert json.loads(text) == summary

    def check(value):
        if isinstance(value, dict):
            for v in value.values():
                check(v)
        elif isinstance(value, list):
            for v in value:
                check(v)
        else:
            assert value is None or type(value) in (str, int, float, bool), type(value)

    check(summary)
    for key in ("backend", "sample_count", "interval", "achieved_interval_mean", "achieved_interval_jitter", "errors"):
        assert key in summary
    assert summary["backend"] == "cpu" and summary["utilization_caveat"] is None
    pid = summary["devices"][f"pid:{os.getpid()}"]
    assert isinstance(pid["rss_bytes_peak"], int) and pid["rss_bytes_peak"] > 10 << 20


def test_save_writes_the_timeline_with_marks_and_reads_back(tmp_path):
    with ResourceSampler(0.02, pids=[os.getpid()], backend="cpu") as sampler:
        sampler.mark("warm-up, done")  # a comma: the CSV must quote it
        time.sleep(0.1)
        sampler.mark("NA")  # a label pandas would read as missing by default
    path = sampler.save(tmp_path / "sub" / "timeline.csv")
    raw = pd.read_csv(path, keep_default_na=False)
    assert tuple(raw.columns) == TIMELINE_COLUMNS
    assert list(raw[raw.device == MARK_DEVICE].mark) == ["warm-up, done", "NA"]
    assert (raw[raw.device != MARK_DEVICE].mark == "").all()
    assert raw.time.is_monotonic_increasing
    frame, marks = read_timeline(path)
    pd.testing.assert_frame_equal(frame, sampler.frame())
    pd.testing.assert_frame_equal(marks, sampler.marks())
    assert sorted(os.listdir(path.parent)) == ["timeline.csv"]  # no temp file left


def test_save_is_atomic_when_the_write_fails(tmp_path, monkeypatch):
    with ResourceSampler(0.02, backend="cpu") as sampler:
        time.sleep(0.05)
    path = tmp_path / "timeline.csv"
    path.write_text("previous run\n")

    def fail(*_):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        sampler.save(path)
    assert path.read_text() == "previous run\n"
    assert os.listdir(tmp_path) == ["timeline.csv"]


def test_read_timeline_rejects_other_csv(tmp_path):
    path = tmp_path / "other.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match=r"not a dpbench sampler timeline; expected columns \['time'"):
        read_timeline(path)


def test_the_sampler_never_imports_torch():
    import subprocess
    import sys

    code = (
        "import sys, time\n"
        "from dpbench.sampler import ResourceSampler\n"
        "with ResourceSampler(0.02) as s:\n"
        "    time.sleep(0.05)\n"
        "s.frame(); s.summary()\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
