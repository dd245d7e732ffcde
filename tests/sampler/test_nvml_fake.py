"""The NVML backend against a fake pynvml module injected through ``ResourceSampler(nvml=…)``."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import warnings

import pytest

from dpbench.sampler import UTILIZATION_CAVEAT, ResourceSampler, SamplerWarning

from .fake_nvml import (
    CUDA_ORDER,
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    FakeGpu,
    FakeNvml,
    NVMLError,
    three_gpus,
)


@pytest.fixture(autouse=True)
def _plain_cuda_env(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)


def _run(sampler: ResourceSampler, seconds: float = 0.15) -> ResourceSampler:
    with sampler:
        time.sleep(seconds)
    return sampler


def _uuids(sampler: ResourceSampler) -> list[str]:
    devices = sampler.summary()["devices"]
    return [devices[f"cuda:{i}"]["uuid"] for i in range(sum(k.startswith("cuda:") for k in devices))]


# -- device mapping ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "mask, expected",
    [
        (None, CUDA_ORDER),  # PCI bus order, not NVML index order or UUID order
        ("2,0", [CUDA_ORDER[2], CUDA_ORDER[0]]),  # indices into CUDA's order, in mask order
        ("GPU-aa,GPU-cc33", ["GPU-aa11-0000", "GPU-cc33-0000"]),  # UUID prefixes
        (" 1 , 2", [CUDA_ORDER[1], CUDA_ORDER[2]]),
        ("1,GPU-zz,0", [CUDA_ORDER[1]]),  # an unknown UUID hides it and what follows
        ("0,2,-1,1", [CUDA_ORDER[0], CUDA_ORDER[2]]),  # CUDA's documented example
        ("0,0,1", [CUDA_ORDER[0]]),  # a repeat is invalid too
        ("1,GPU-,2", [CUDA_ORDER[1]]),  # an ambiguous prefix is invalid
    ],
)
def test_cuda_visible_devices_maps_to_uuids_like_cuda(monkeypatch, mask, expected):
    if mask is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", mask)
    fake = FakeNvml(three_gpus())
    sampler = _run(ResourceSampler(0.02, nvml=fake))
    assert sampler.backend == "nvml"
    assert _uuids(sampler) == expected
    # The rows carry each GPU's own readings (the fake gives every GPU distinct values).
    by_uuid = {g.uuid: g for g in fake.gpus}
    frame = sampler.frame()
    for i, uuid in enumerate(expected):
        rows = frame[frame.device == f"cuda:{i}"]
        assert len(rows) >= 2
        assert (rows.gpu_util_pct == by_uuid[uuid].util[0]).all()
        assert (rows.temperature_c == by_uuid[uuid].temperature).all()


def test_devices_select_by_cuda_index_and_label(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,1")
    sampler = _run(ResourceSampler(0.02, devices=["cuda:1"], nvml=FakeNvml(three_gpus())))
    assert set(sampler.frame().device) == {"cpu", "cuda:1"}
    assert sampler.summary()["devices"]["cuda:1"]["uuid"] == CUDA_ORDER[1]


def test_devices_accept_torch_like_device_objects():
    from types import SimpleNamespace

    cuda2 = SimpleNamespace(type="cuda", index=2)  # the attributes torch.device has
    sampler = _run(ResourceSampler(0.02, devices=[cuda2], nvml=FakeNvml(three_gpus())), 0.05)
    assert sorted(sampler.summary()["devices"]) == ["cpu", "cuda:2"]
    assert sampler.summary()["devices"]["cuda:2"]["uuid"] == CUDA_ORDER[2]
    with pytest.raises(ValueError, match="devices: expected CUDA indices"):
        ResourceSampler(devices=[SimpleNamespace(type="cuda", index=None)], nvml=FakeNvml(three_gpus()))


def test_mig_uuid_in_cuda_visible_devices_samples_that_instance(monkeypatch):
    gpus = three_gpus()
    mig = FakeGpu(
        "MIG-5e1f-0000", "", used=2 << 30, unsupported={"nvmlDeviceGetUtilizationRates", "nvmlDeviceGetPowerUsage"}
    )
    gpus[0].mig = [FakeGpu("MIG-77aa-0000", ""), mig]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-5e1f")
    sampler = _run(ResourceSampler(0.02, nvml=FakeNvml(gpus)))
    info = sampler.summary()["devices"]["cuda:0"]
    assert info["uuid"] == "MIG-5e1f-0000"
    assert info["mem_used_bytes_peak"] == 2 << 30
    assert info["gpu_util_pct_mean"] is None and "utilization" in info["unsupported"]
    assert sampler.summary()["errors"] == []


@pytest.mark.parametrize("devices", [[3], ["cuda:5"], "cuda:3"])
def test_unknown_device_names_it_and_the_available_ones(monkeypatch, devices):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2")
    with pytest.raises(ValueError, match=r"unknown device .*(3|5).*available: cuda:0 .*GPU-cc33"):
        ResourceSampler(devices=devices, nvml=FakeNvml(three_gpus()))


@pytest.mark.parametrize("devices", [["gpu0"], [1.0], ["cuda"], [True]])
def test_malformed_device_entries_are_rejected(devices):
    with pytest.raises(ValueError, match="devices: expected CUDA indices"):
        ResourceSampler(devices=devices, nvml=FakeNvml(three_gpus()))


def test_heterogeneous_gpus_warn_unless_pci_bus_order(monkeypatch):
    gpus = three_gpus()
    gpus[1].name = "Fake Other GPU"
    with pytest.warns(SamplerWarning, match="CUDA_DEVICE_ORDER=PCI_BUS_ID"):
        ResourceSampler(nvml=FakeNvml(gpus))
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ResourceSampler(nvml=FakeNvml(gpus))


# -- backend choice ----------------------------------------------------------------------------
@pytest.mark.parametrize("code", [NVML_ERROR_LIBRARY_NOT_FOUND, NVML_ERROR_DRIVER_NOT_LOADED])
def test_auto_falls_back_to_cpu_when_nvml_cannot_start(code):
    fake = FakeNvml(three_gpus(), init_error=code)
    sampler = _run(ResourceSampler(0.02, nvml=fake))
    assert sampler.backend == "cpu"
    assert "nvmlInit failed" in sampler.summary()["backend_reason"]
    assert set(sampler.frame().device) == {"cpu"}
    with pytest.raises(RuntimeError, match="backend='nvml' but NVML cannot be used"):
        ResourceSampler(backend="nvml", nvml=fake)
    with pytest.raises(ValueError, match=r"devices: unknown device.*available: none"):
        ResourceSampler(devices=[0], nvml=fake)


def test_no_visible_gpu_falls_back_to_cpu(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    fake = FakeNvml(three_gpus())
    sampler = ResourceSampler(nvml=fake)
    assert sampler.backend == "cpu" and "CUDA_VISIBLE_DEVICES" in sampler.backend_reason
    assert fake.refs == 0  # the probe shut NVML down again
    assert ResourceSampler(nvml=FakeNvml([])).backend_reason.endswith("NVML found no GPUs")


def test_backend_cpu_ignores_nvml_and_refuses_devices():
    fake = FakeNvml(three_gpus())
    assert ResourceSampler(backend="cpu", nvml=fake).backend == "cpu"
    assert fake.init_calls == 0
    with pytest.raises(ValueError, match="backend='cpu' watches no GPU"):
        ResourceSampler(backend="cpu", devices=[0])


# -- metrics -------------------------------------------------------------------------------
def test_metrics_units_and_summary():
    fake = FakeNvml(three_gpus())
    sampler = _run(ResourceSampler(0.02, nvml=fake), 0.2)
    summary = sampler.summary()
    assert summary["backend"] == "nvml" and summary["utilization_caveat"] == UTILIZATION_CAVEAT
    assert "1/6 s" in UTILIZATION_CAVEAT and "not SM occupancy" in UTILIZATION_CAVEAT
    assert summary["errors"] == []
    frame = sampler.frame()
    for i, uuid in enumerate(CUDA_ORDER):
        gpu = next(g for g in fake.gpus if g.uuid == uuid)
        rows = frame[frame.device == f"cuda:{i}"]
        assert (rows.mem_used_bytes == gpu.used).all()  # v2: excludes reserved
        assert (rows.mem_reserved_bytes == gpu.reserved).all()
        assert (rows.mem_total_bytes == gpu.total).all()
        assert (rows.power_w == gpu.power_mw / 1000).all()
        assert (rows.sm_clock_mhz == gpu.sm_clock).all() and (rows.mem_clock_mhz == gpu.mem_clock).all()
        info = summary["devices"][f"cuda:{i}"]
        assert info["gpu_util_pct_mean"] == gpu.util[0] and info["mem_util_pct_max"] == gpu.util[1]
        assert info["temperature_c_max"] == gpu.temperature
        assert info["memory_api"] == "v2"
        # Energy is a difference of counter readings (mJ → J), not an integral of power:
        # the column counts from the reading taken at start(). A 0.2 s window is shorter than the
        # counter needs (tests/sampler/test_energy.py): its energy is absent with the reason, not a number.
        readings = fake.energy_readings[uuid]
        assert list(rows.energy_j) == [(r - readings[0]) / 1000 for r in readings[1:]]
        assert info["energy_j"] is None and info["energy_absent"] == "short_window"
        assert info["energy_window_s"] == pytest.approx(rows.time.max() - rows.time.min())
    assert summary["sample_count"] == len(frame[frame.device == "cuda:0"])
    # 0.2 s of samples is short of the 2 s a GPU's readings need (dpbench.sampler.energy.min_gpu_window_s).
    gpu_times = frame[frame.device.str.startswith("cuda:")].time
    assert summary["gpu_window"] == {
        "window_s": pytest.approx(gpu_times.max() - gpu_times.min()),
        "needed_s": 2.0,
        "short": True,
    }


def test_v1_only_driver_falls_back_and_reports_used_with_reserved():
    fake = FakeNvml(three_gpus(), v1_only=True)
    sampler = _run(ResourceSampler(0.02, nvml=fake))
    gpu = next(g for g in fake.gpus if g.uuid == CUDA_ORDER[0])
    rows = sampler.frame().query("device == 'cuda:0'")
    assert (rows.mem_used_bytes == gpu.used + gpu.reserved).all()
    assert rows.mem_reserved_bytes.isna().all()
    assert sampler.summary()["devices"]["cuda:0"]["memory_api"].startswith("v1")
    # v2 is tried once per device, then v1 only: one failed v2 call plus one v1 per sample.
    assert fake.count("nvmlDeviceGetMemoryInfo", gpu) == len(rows) + 1
    assert sampler.summary()["errors"] == []


def test_not_supported_metrics_are_missing_asked_once_and_not_errors():
    gpus = three_gpus()
    target = next(g for g in gpus if g.uuid == CUDA_ORDER[1])
    target.unsupported = {
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetTotalEnergyConsumption",
        "nvmlDeviceGetTemperatureV",
        "nvmlDeviceGetTemperature",
    }
    fake = FakeNvml(gpus)
    sampler = _run(ResourceSampler(0.02, nvml=fake))
    frame, summary = sampler.frame(), sampler.summary()
    rows = frame[frame.device == "cuda:1"]
    assert rows.power_w.isna().all() and rows.energy_j.isna().all() and rows.temperature_c.isna().all()
    assert (rows.gpu_util_pct == target.util[0]).all()  # the rest keeps sampling
    info = summary["devices"]["cuda:1"]
    assert info["power_w_mean"] is None and info["energy_j"] is None
    assert info["unsupported"] == ["energy", "power", "temperature"]
    assert fake.count("nvmlDeviceGetPowerUsage", target) == 1
    cuda0 = next(g for g in gpus if g.uuid == CUDA_ORDER[0])
    assert summary["devices"]["cuda:0"]["power_w_mean"] == cuda0.power_mw / 1000  # the fake's constant draw
    assert summary["errors"] == []


def test_temperature_falls_back_when_the_versioned_call_is_missing():
    fake = FakeNvml(three_gpus(), temperature_v=False)
    sampler = _run(ResourceSampler(0.02, nvml=fake))
    assert sampler.summary()["devices"]["cuda:0"]["temperature_c_max"] == 61
    assert fake.count("nvmlDeviceGetTemperatureV", fake.gpus[1]) == 1
    assert sampler.summary()["errors"] == []


def test_per_process_gpu_memory_sums_the_pid_and_its_children_over_watched_gpus():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        me = os.getpid()
        gpus = three_gpus()
        by_uuid = {g.uuid: g for g in gpus}
        by_uuid[CUDA_ORDER[0]].processes = [(me, 100 << 20), (1, 1 << 30)]  # pid 1: not watched
        by_uuid[CUDA_ORDER[1]].processes = [(me, 50 << 20)]
        by_uuid[CUDA_ORDER[2]].processes = [(child.pid, 25 << 20)]
        every = _run(ResourceSampler(0.02, pids=[me], nvml=FakeNvml(gpus)))
        rows = every.frame().query(f"device == 'pid:{me}'")
        assert (rows.proc_gpu_mem_bytes == (175 << 20)).all()
        assert (rows.rss_bytes > 0).all()
        some = _run(ResourceSampler(0.02, pids=[me], devices=[0, 2], nvml=FakeNvml(gpus)))
        assert some.summary()["devices"][f"pid:{me}"]["proc_gpu_mem_bytes_peak"] == 125 << 20
    finally:
        child.kill()
        child.wait()


# -- NVML lifecycle and errors in the sampling thread ---------------------------------------------
def test_init_and_shutdown_pair_per_sampler_also_two_at_once():
    fake = FakeNvml(three_gpus())
    a, b = ResourceSampler(0.02, nvml=fake), ResourceSampler(0.03, nvml=fake)
    assert fake.refs == 0
    with a:
        with b:
            assert fake.refs == 2
            time.sleep(0.1)
        assert fake.refs == 1
    assert fake.refs == 0
    assert a.summary()["sample_count"] >= 2 and b.summary()["sample_count"] >= 2


def test_nvml_error_in_one_metric_is_logged_and_sampling_goes_on():
    gpus = three_gpus()
    gpus[1].faults["nvmlDeviceGetUtilizationRates"] = NVMLError(NVML_ERROR_GPU_IS_LOST)
    sampler = ResourceSampler(0.02, nvml=FakeNvml(gpus))
    with pytest.warns(SamplerWarning, match="GPU is lost"):
        _run(sampler)
    errors = sampler.summary()["errors"]
    assert len(errors) == 1 and "cuda:0 utilization: NVMLError: GPU is lost (x" in errors[0]
    rows = sampler.frame().query("device == 'cuda:0'")
    assert rows.gpu_util_pct.isna().all() and rows.power_w.notna().all() and len(rows) >= 3


def test_a_failing_sample_ends_the_thread_cleanly_after_repeated_failures():
    gpus = three_gpus()
    gpus[0].faults["nvmlDeviceGetUtilizationRates"] = lambda: "not a utilization struct"
    sampler = ResourceSampler(0.005, nvml=FakeNvml(gpus))
    sampler.start()
    deadline = time.monotonic() + 5
    while sampler.sampling and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.warns(SamplerWarning):
        sampler.stop()
    errors = sampler.summary()["errors"]
    assert any("sample failed: AttributeError" in e for e in errors)
    assert any("sampling stopped after 25 failed samples in a row" in e for e in errors)


def test_a_blocked_nvml_call_cannot_hang_stop():
    release = threading.Event()
    gpus = three_gpus()
    gpus[0].faults["nvmlDeviceGetPowerUsage"] = lambda: release.wait(20) and 1000
    fake = FakeNvml(gpus)
    sampler = ResourceSampler(0.02, nvml=fake)
    sampler.join_timeout = 0.3
    sampler.start()
    time.sleep(0.1)
    (thread,) = [t for t in threading.enumerate() if t.name == "dpbench-sampler"]
    began = time.monotonic()
    with pytest.warns(SamplerWarning, match="still blocked"):
        sampler.stop()
    assert time.monotonic() - began < 5
    release.set()
    thread.join(5)
    assert not thread.is_alive()
    assert fake.refs == 1  # not shut down under a thread that was inside NVML
    fake.nvmlShutdown()
