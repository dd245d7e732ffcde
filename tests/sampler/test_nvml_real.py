"""The NVML backend against the real driver: skipped with a reason where there is no GPU."""

from __future__ import annotations

import os
import time
import warnings

import pytest

from dpbench.sampler import ResourceSampler


def _nvml_gpu_count() -> int:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return 0
    try:
        return pynvml.nvmlDeviceGetCount()
    finally:
        pynvml.nvmlShutdown()


# What NVML may answer for one metric with nothing wrong: inside a VM or a container a query can be
# refused (NoPermission), and a board may not implement one (NotSupported).
ACCEPTED_NVML_ANSWERS = ("NVMLError_NoPermission", "NVMLError_NotSupported")


def unexpected_nvml_errors(errors: list[str]) -> list[str]:
    """The sampler's errors (``"<device> <metric>: <exception class>: <message>"``) other than
    the accepted answers; those are recorded as a warning in the test log."""
    accepted = [e for e in errors if any(f": {name}: " in e for name in ACCEPTED_NVML_ANSWERS)]
    if accepted:
        warnings.warn(f"NVML refused or lacks {len(accepted)} metric(s): {'; '.join(accepted)}", stacklevel=2)
    return [e for e in errors if e not in accepted]


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(_nvml_gpu_count() == 0, reason="needs an NVIDIA GPU with a working NVML driver"),
]


def _torch_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA in torch to compare the device mapping")
    return torch


def test_real_nvml_samples_every_visible_gpu():
    with ResourceSampler(0.05, pids=[os.getpid()]) as sampler:
        time.sleep(0.5)
    summary = sampler.summary()
    assert sampler.backend == "nvml" and unexpected_nvml_errors(summary["errors"]) == []
    gpus = [label for label in summary["devices"] if label.startswith("cuda:")]
    assert gpus == [f"cuda:{i}" for i in range(len(gpus))] and gpus
    for label in gpus:
        info = summary["devices"][label]
        assert info["samples"] >= 5
        assert info["mem_total_bytes_max"] > 0 and info["uuid"].startswith(("GPU-", "MIG-"))
        if info["energy_j"] is not None:
            assert info["energy_j"] >= 0


def test_cuda_index_maps_to_the_same_uuid_as_torch():
    torch = _torch_cuda()
    sampler = ResourceSampler(0.05)
    with sampler:
        time.sleep(0.1)
    devices = sampler.summary()["devices"]
    for i in range(torch.cuda.device_count()):
        # torch reports the UUID without its "GPU-" prefix.
        expected = str(torch.cuda.get_device_properties(i).uuid)
        assert devices[f"cuda:{i}"]["uuid"].split("-", 1)[1] == expected


def test_gpu_work_raises_utilisation_and_process_memory():
    torch = _torch_cuda()
    x = torch.randn(4096, 4096, device="cuda:0")
    torch.cuda.synchronize()
    me = os.getpid()
    with ResourceSampler(0.05, pids=[me], devices=[0]) as sampler:
        time.sleep(1.2)  # NVML utilization averages over up to 1 s
        sampler.mark("busy")
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            y = x @ x
        torch.cuda.synchronize()  # sync so the busy window really covers GPU work
        sampler.mark("end")
    del y
    frame, marks = sampler.frame(), sampler.marks()
    busy_at, end_at = marks.time.tolist()
    gpu = frame[frame.device == "cuda:0"]
    idle = gpu[gpu.time < busy_at].gpu_util_pct
    busy = gpu[(gpu.time > busy_at + 1.0) & (gpu.time <= end_at)].gpu_util_pct
    assert busy.mean() > idle.mean() + 30, (busy.mean(), idle.mean())
    proc = frame[frame.device == f"pid:{me}"].proc_gpu_mem_bytes
    # In a container NVML may list host pids that don't match ours; the sampler then reports
    # unknown (NaN), never 0.
    assert not (proc == 0).any()
    if proc.isna().all():
        pytest.skip("NVML process list does not show this process's pid (PID namespace?)")
    assert proc.max() >= 64 << 20  # x alone is 64 MiB


def test_real_gpu_reports_clock_facts():
    with ResourceSampler(0.05) as sampler:
        time.sleep(0.5)
    summary = sampler.summary()
    assert unexpected_nvml_errors(summary["errors"]) == [] and isinstance(summary["clock_warnings"], list)
    for label, info in summary["devices"].items():
        if not label.startswith("cuda:"):
            continue
        if info["sm_clock_mhz_max"] is not None:
            assert 0 < info["sm_clock_mhz_min"] <= info["sm_clock_mhz_mean"] <= info["sm_clock_mhz_max"]
        # A list of names, or None where the board cannot say (MIG); an idle GPU usually says gpu_idle.
        reasons = info["throttle_reasons"]
        assert reasons is None or all(isinstance(n, str) and not n.startswith("unknown") for n in reasons), reasons
        assert info["clocks_locked"] in (True, False, None) and info["clocks_locked_basis"]
