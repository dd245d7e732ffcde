"""The control runs on every device a case uses, sized for the device type; the CPU control is
the one saved runs were measured with. CUDA is faked at the module boundary."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from dpbench.launcher import control
from dpbench.launcher.control import CONTROL_SPEC, CUDA_CONTROL_SPEC, control_devices, control_spec, control_worker


def _ctx(devices=None, device="cpu"):
    state = {} if devices is None else {"trainer": SimpleNamespace(local_devices=lambda: list(devices))}
    return SimpleNamespace(device=torch.device(device), state=state)


def test_the_cpu_control_is_unchanged():
    # Saved runs compare control_s across runs: this spec is part of schema 2.
    assert CONTROL_SPEC == {"op": "matmul", "size": 192, "chain": 8, "repeats": 5, "dtype": "float32"}
    assert control_spec("cpu") is CONTROL_SPEC and control_spec("cuda") is CUDA_CONTROL_SPEC
    assert CUDA_CONTROL_SPEC["size"] >= 4096  # compute-bound on any GPU, not launch latency


def test_the_control_covers_every_replica_device_once():
    assert control_devices(_ctx(["cuda:0", "cuda:0", "cuda:1", "cuda:2"])) == ["cuda:0", "cuda:1", "cuda:2"]
    assert control_devices(_ctx(["cpu", "cpu"])) == ["cpu"]
    assert control_devices(_ctx(None, "cpu")) == ["cpu"]  # a collective case: the worker's device


def test_cuda_control_queues_on_every_gpu_and_waits_for_each(monkeypatch):
    made, synced = [], []

    def operand(size, dtype, device):
        made.append((size, dtype, device))
        return torch.eye(8)  # CPU stand-in for the GPU operand

    monkeypatch.setattr(control, "_operand", operand)
    monkeypatch.setattr(torch.cuda, "synchronize", synced.append)
    seconds = control_worker(_ctx(["cuda:0", "cuda:1", "cuda:0"]))
    assert seconds > 0
    size, dtype = CUDA_CONTROL_SPEC["size"], torch.float16
    assert made == [(size, dtype, "cuda:0"), (size, dtype, "cuda:1")]
    # Once after the warm-up, then once per repeat: every GPU each time.
    assert synced == ["cuda:0", "cuda:1"] * (1 + CUDA_CONTROL_SPEC["repeats"])


def test_cpu_control_times_one_chain_on_the_cpu():
    assert 0 < control_worker(_ctx(["cpu", "cpu"])) < 5
