"""GPUs shared by several ranks, MIG instances as CUDA devices, and per-process memory that NVML
cannot attribute: against the fake pynvml (tests/sampler/fake_nvml.py)."""

from __future__ import annotations

import math
import os
import time
from types import SimpleNamespace

import pytest

from dpbench.sampler import ResourceSampler
from dpbench.sampler.gpus import rank_devices, unique_devices

from .fake_nvml import CUDA_ORDER, FakeGpu, FakeNvml, three_gpus


@pytest.fixture(autouse=True)
def _plain_cuda_env(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)


def _uuids(sampler: ResourceSampler) -> dict[str, str]:
    return {label: info["uuid"] for label, info in sampler.summary()["devices"].items() if label.startswith("cuda:")}


def _run(sampler: ResourceSampler, seconds: float = 0.1) -> ResourceSampler:
    with sampler:
        time.sleep(seconds)
    return sampler


# -- several ranks on one GPU ------------------------------------------------------------------
def test_per_rank_devices_become_each_physical_device_once():
    assert unique_devices(["cuda:0", "cuda:0"]) == ["cuda:0"]
    assert unique_devices(["cuda:1", "cuda:0", "cuda:1", "cpu"]) == ["cuda:1", "cuda:0"]
    assert unique_devices(["cpu", "cpu"]) == []
    assert rank_devices(["cuda:0", "cuda:1", "cuda:0"]) == {"cuda:0": [0, 2], "cuda:1": [1]}


def test_a_case_with_two_ranks_on_one_gpu_samples_it_once(monkeypatch):
    """measure/cases.py hands the sampler run.info.devices, one entry per rank; two ranks on
    cuda:0 must not make it fail with "listed twice" (every w2 case on one GPU did)."""
    import dpbench.sampler as sampler_module
    from dpbench.measure import cases

    fake = FakeNvml(three_gpus())
    real = sampler_module.ResourceSampler
    monkeypatch.setattr(sampler_module, "ResourceSampler", lambda **kw: real(nvml=fake, **kw))
    profile = SimpleNamespace(sample_interval=0.02)
    sampler = cases._sampled([os.getpid()], ["cuda:0", "cuda:0"], profile)
    _run(sampler)
    assert _uuids(sampler) == {"cuda:0": CUDA_ORDER[0]}
    summary, recorded = cases._finish_sampler(sampler, None, "case", ["cuda:0", "cuda:0"])
    assert summary["rank_devices"] == {"cuda:0": [0, 1]} and recorded is None
    # A CPU case on a GPU machine: no CUDA device per rank → every visible GPU, as before.
    assert sorted(_uuids(_run(cases._sampled([], ["cpu", "cpu"], profile)))) == ["cuda:0", "cuda:1", "cuda:2"]


# -- MIG ---------------------------------------------------------------------------------------
def _mig_machine() -> list[FakeGpu]:
    """three_gpus() with MIG on the GPU CUDA calls cuda:0 (cc): two instances there."""
    gpus = three_gpus()
    cc = next(g for g in gpus if g.uuid == CUDA_ORDER[0])
    cc.mig = [
        FakeGpu("MIG-1111-0000", "", name="Fake GPU 80GB MIG 3g.40gb", temperature=71),
        FakeGpu("MIG-2222-0000", "", name="Fake GPU 80GB MIG 1g.10gb", temperature=72),
    ]
    return gpus


def test_without_a_mask_cuda_enumerates_mig_instances_in_place_of_their_gpu():
    sampler = _run(ResourceSampler(0.02, nvml=FakeNvml(_mig_machine())))
    assert _uuids(sampler) == {
        "cuda:0": "MIG-1111-0000",
        "cuda:1": "MIG-2222-0000",
        "cuda:2": CUDA_ORDER[1],
        "cuda:3": CUDA_ORDER[2],
    }
    devices = sampler.summary()["devices"]
    assert devices["cuda:1"]["name"] == "Fake GPU 80GB MIG 1g.10gb"  # the instance's own name
    assert devices["cuda:1"]["temperature_c_max"] == 72  # read through the instance's handle
    assert sampler.summary()["errors"] == []


def test_plain_indices_in_the_mask_index_the_mig_expanded_list(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,3")
    sampler = _run(ResourceSampler(0.02, nvml=FakeNvml(_mig_machine())))
    assert _uuids(sampler) == {"cuda:0": "MIG-2222-0000", "cuda:1": CUDA_ORDER[2]}


def test_mig_uuids_in_the_mask_select_those_instances(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-2222,MIG-1111")
    sampler = _run(ResourceSampler(0.02, nvml=FakeNvml(_mig_machine())))
    assert _uuids(sampler) == {"cuda:0": "MIG-2222-0000", "cuda:1": "MIG-1111-0000"}


def test_a_gpu_in_mig_mode_without_instances_is_no_cuda_device():
    gpus = _mig_machine()
    cc = next(g for g in gpus if g.uuid == CUDA_ORDER[0])
    cc.mig, cc.mig_enabled = [], True
    sampler = _run(ResourceSampler(0.02, nvml=FakeNvml(gpus)))
    assert _uuids(sampler) == {"cuda:0": CUDA_ORDER[1], "cuda:1": CUDA_ORDER[2]}


# -- per-process memory NVML cannot attribute --------------------------------------------------
def test_process_memory_is_unknown_not_zero_when_no_watched_pid_is_listed():
    """In a container NVML lists host pids: none matches ours, and the reading is unknown."""
    me = os.getpid()
    gpus = three_gpus()
    for gpu in gpus:
        gpu.processes = [(me + 100000, 5 << 30)]  # someone's (or our host-side) pid
    sampler = _run(ResourceSampler(0.02, pids=[me], nvml=FakeNvml(gpus)))
    rows = sampler.frame().query(f"device == 'pid:{me}'")
    assert len(rows) >= 2 and rows.proc_gpu_mem_bytes.isna().all()
    assert sampler.summary()["devices"][f"pid:{me}"]["proc_gpu_mem_bytes_peak"] is None


def test_process_memory_counts_when_the_pid_is_listed_on_one_gpu_only():
    me = os.getpid()
    gpus = three_gpus()
    gpus[0].processes = [(me, 7 << 20)]
    sampler = _run(ResourceSampler(0.02, pids=[me], nvml=FakeNvml(gpus)))
    rows = sampler.frame().query(f"device == 'pid:{me}'")
    assert (rows.proc_gpu_mem_bytes == 7 << 20).all()
    assert not math.isnan(sampler.summary()["devices"][f"pid:{me}"]["proc_gpu_mem_bytes_peak"])
