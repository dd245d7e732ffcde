"""GPU clocks over a recording: throttle reasons per sample, clock stats, clocks_locked, clock_warnings.

Through the sampler with the fake pynvml (scripted clocks and reasons), and the pure
summary function on hand-made sample lists.
"""

from __future__ import annotations

import json
import math
import time

import pandas as pd
import pytest

from dpbench.sampler import TIMELINE_COLUMNS, ResourceSampler, read_timeline
from dpbench.sampler.clocks import clock_summary, decode_reasons

from .fake_nvml import CUDA_ORDER, FakeNvml, three_gpus

IDLE, APP, POWER_CAP, HW_SLOWDOWN = 0x1, 0x2, 0x4, 0x8
NAN = math.nan


@pytest.fixture(autouse=True)
def _plain_cuda_env(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)


def _gpu(fake: FakeNvml, index: int = 0):
    return next(g for g in fake.gpus if g.uuid == CUDA_ORDER[index])


def _record(fake: FakeNvml, samples: int = 8) -> ResourceSampler:
    """Sample cuda:0 until it was read ``samples`` times (not a fixed sleep: the machine is noisy)."""
    gpu = _gpu(fake)
    sampler = ResourceSampler(0.01, devices=["cuda:0"], nvml=fake)
    with sampler:
        deadline = time.monotonic() + 20
        while fake.count("nvmlDeviceGetUtilizationRates", gpu) < samples and time.monotonic() < deadline:
            time.sleep(0.01)
    return sampler


# -- the pure pieces -------------------------------------------------------------------------------
def test_reason_bits_decode_to_names_in_bit_order():
    assert decode_reasons(0) == []
    assert decode_reasons(IDLE | POWER_CAP) == ["gpu_idle", "sw_power_cap"]
    assert decode_reasons(0x20 | 0x40 | 0x80 | 0x100) == [
        "sw_thermal",
        "hw_thermal",
        "hw_power_brake",
        "display_clocks",
    ]
    assert decode_reasons(APP | 0x10 | 0x8000) == ["applications_clocks_setting", "sync_boost", "unknown_0x8000"]


@pytest.mark.parametrize(
    "clocks, reasons, locked, spread",
    [
        ([1980] * 5, [0] * 5, True, 0.0),
        ([1980, 1975, 1980, 1972], [APP] * 4, True, pytest.approx(0.404, abs=1e-3)),  # app clocks held: benign
        ([1980, 1800, 1980, 1700], [0] * 4, False, pytest.approx(14.14, abs=0.01)),
        ([1980] * 4, [0, POWER_CAP, 0, 0], False, 0.0),
        ([345, 345, 1980, 1980, 1980], [IDLE, IDLE, 0, 0, 0], True, 0.0),  # idle dips are left out
        ([1980, 1980], [0, 0], None, 0.0),  # too few busy samples to tell
        ([1980] * 4, [NAN] * 4, True, 0.0),  # reasons unreadable: judged on clocks alone
        ([NAN] * 4, [0] * 4, None, None),  # no clock readings
    ],
)
def test_clock_summary_judges_locked_from_busy_samples(clocks, reasons, locked, spread):
    out = clock_summary([float(c) for c in clocks], [float(r) for r in reasons])
    assert out["clocks_locked"] is locked, out["clocks_locked_basis"]
    assert out["sm_clock_busy_spread_pct"] == spread
    assert isinstance(out["clocks_locked_basis"], str) and out["clocks_locked_basis"]
    assert json.loads(json.dumps(out)) == out


def test_clock_summary_reasons_are_the_union_or_none_when_never_read():
    assert clock_summary([1.0] * 3, [IDLE, POWER_CAP, NAN])["throttle_reasons"] == ["gpu_idle", "sw_power_cap"]
    assert clock_summary([1.0] * 3, [0, 0, 0])["throttle_reasons"] == []
    assert clock_summary([1.0] * 3, [NAN] * 3)["throttle_reasons"] is None


# -- through the sampler ------------------------------------------------------------------------
def test_steady_clocks_no_warning_and_reasons_recorded_per_sample():
    fake = FakeNvml(three_gpus())
    gpu = _gpu(fake)
    gpu.sm_clock, gpu.reasons_seq = 1980, [IDLE, IDLE] + [0]  # idle at first, then busy
    sampler = _record(fake)
    summary = sampler.summary()
    info = summary["devices"]["cuda:0"]
    rows = sampler.frame().query("device == 'cuda:0'")
    assert list(rows.throttle_reasons[:3]) == [IDLE, IDLE, 0]
    assert info["throttle_reasons"] == ["gpu_idle"]
    assert info["sm_clock_mhz_min"] == info["sm_clock_mhz_mean"] == info["sm_clock_mhz_max"] == 1980
    assert info["mem_clock_mhz_min"] == info["mem_clock_mhz_max"] == gpu.mem_clock
    assert info["clocks_locked"] is True and info["sm_clock_busy_samples"] == len(rows) - 2
    assert summary["clock_warnings"] == [] and summary["errors"] == []
    assert info["sm_app_clock_target_mhz"] == info["sm_app_clock_default_mhz"] == info["sm_max_clock_mhz"] == 1980


def test_floating_clocks_and_slowdown_reasons_warn_in_one_line_each():
    fake = FakeNvml(three_gpus())
    gpu = _gpu(fake)
    gpu.sm_clock_seq = [1980, 1980, 1700]  # 14% below the first readings from the third on
    gpu.reasons_seq = [0, POWER_CAP | HW_SLOWDOWN, 0]
    sampler = _record(fake)
    summary = sampler.summary()
    info = summary["devices"]["cuda:0"]
    assert info["sm_clock_mhz_min"] == 1700 and info["sm_clock_mhz_max"] == 1980
    assert info["sm_clock_busy_spread_pct"] == pytest.approx(280 / 1980 * 100)
    assert info["throttle_reasons"] == ["sw_power_cap", "hw_slowdown"]
    assert info["clocks_locked"] is False
    warnings = summary["clock_warnings"]
    assert len(warnings) == 2 and all("\n" not in w for w in warnings)
    assert warnings[0].startswith("cuda:0: SM clock floated 14.1%")
    assert warnings[1] == "cuda:0: clock slowdown reason(s) seen: sw_power_cap, hw_slowdown"


def test_application_clock_setting_alone_is_not_a_warning():
    fake = FakeNvml(three_gpus())
    gpu = _gpu(fake)
    gpu.sm_clock, gpu.reasons, gpu.app_clock_target = 1410, APP, 1410
    summary = _record(fake).summary()
    assert summary["devices"]["cuda:0"]["throttle_reasons"] == ["applications_clocks_setting"]
    assert summary["devices"]["cuda:0"]["clocks_locked"] is True
    assert summary["devices"]["cuda:0"]["sm_app_clock_target_mhz"] == 1410
    assert summary["clock_warnings"] == []


def test_driver_without_clocks_event_falls_back_to_throttle_reasons():
    fake = FakeNvml(three_gpus(), event_reasons=False)
    gpu = _gpu(fake)
    gpu.reasons = POWER_CAP
    sampler = _record(fake)
    rows = sampler.frame().query("device == 'cuda:0'")
    assert (rows.throttle_reasons == POWER_CAP).all()
    assert fake.count("nvmlDeviceGetCurrentClocksEventReasons", gpu) == 1  # tried once, then the old name
    assert fake.count("nvmlDeviceGetCurrentClocksThrottleReasons", gpu) == len(rows)
    assert sampler.summary()["errors"] == []


def test_pynvml_without_the_new_name_uses_the_old_one():
    fake = FakeNvml(three_gpus(), hide={"nvmlDeviceGetCurrentClocksEventReasons"})
    assert not hasattr(fake, "nvmlDeviceGetCurrentClocksEventReasons")
    _gpu(fake).reasons = HW_SLOWDOWN
    summary = _record(fake).summary()
    assert summary["devices"]["cuda:0"]["throttle_reasons"] == ["hw_slowdown"]
    assert summary["errors"] == []


@pytest.mark.parametrize("how", ["not supported", "not in pynvml"])
def test_unreadable_reasons_are_missing_not_errors(how):
    gpus = three_gpus()
    names = {
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetCurrentClocksThrottleReasons",
        "nvmlDeviceGetClock",
        "nvmlDeviceGetMaxClockInfo",
    }
    if how == "not supported":
        fake = FakeNvml(gpus)
        _gpu(fake).unsupported = set(names)
    else:
        fake = FakeNvml(gpus, hide=names)
    sampler = _record(fake)
    summary = sampler.summary()
    info = summary["devices"]["cuda:0"]
    assert sampler.frame().query("device == 'cuda:0'").throttle_reasons.isna().all()
    assert info["throttle_reasons"] is None and "throttle_reasons" in info["unsupported"]
    assert info["sm_app_clock_target_mhz"] is None and info["sm_max_clock_mhz"] is None
    assert info["clocks_locked"] is True and "not readable" in info["clocks_locked_basis"]
    assert summary["errors"] == [] and summary["clock_warnings"] == []
    if how == "not supported":  # asked once, then remembered as unsupported
        assert fake.count("nvmlDeviceGetCurrentClocksThrottleReasons", _gpu(fake)) == 1


def test_cpu_backend_summary_keeps_its_shape_with_empty_clock_warnings():
    with ResourceSampler(0.02, backend="cpu") as sampler:
        time.sleep(0.05)
    summary = sampler.summary()
    assert summary["clock_warnings"] == []
    assert {"backend", "devices", "errors", "sample_count", "thread_cpus"} <= set(summary)
    assert not any(k.startswith("cuda:") for k in summary["devices"])
    assert "throttle_reasons" not in summary["devices"]["cpu"]


# -- the timeline file --------------------------------------------------------------------------
def test_reasons_round_trip_through_the_timeline_and_old_files_still_read(tmp_path):
    fake = FakeNvml(three_gpus())
    _gpu(fake).reasons_seq = [IDLE, POWER_CAP]
    sampler = _record(fake, samples=4)
    frame, _ = read_timeline(sampler.save(tmp_path / "t.csv"))
    rows = frame.query("device == 'cuda:0'")
    assert list(rows.throttle_reasons[:2]) == [IDLE, POWER_CAP]
    # A timeline saved before the column existed.
    old = pd.read_csv(tmp_path / "t.csv", dtype=str, keep_default_na=False).drop(columns=["throttle_reasons"])
    old.to_csv(tmp_path / "old.csv", index=False)
    old_frame, _ = read_timeline(tmp_path / "old.csv")
    assert tuple(old_frame.columns) == TIMELINE_COLUMNS
    assert old_frame.throttle_reasons.isna().all()
    assert old_frame.sm_clock_mhz.equals(frame.sm_clock_mhz)
