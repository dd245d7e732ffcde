"""Which peak MFU divides by on a GPU: the exact marketing name, the math the FLOPs ran in (TF32
convolutions by default), and every distinct GPU once, across hosts. All on CPU: names are
strings, the TF32 switches are readable on a CPU build of torch, and combine() is pure."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dpbench.strategies import CommonOptions
from dpbench.strategies._metrics import (
    PEAK_TFLOPS,
    count_step_flops,
    count_step_flops_by_kind,
    fp32_math,
    math_mode,
    peak_flops,
    table_entry,
    table_peak_flops,
)
from dpbench.strategies.profiling import combine


# -- names -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, entry",
    [
        ("NVIDIA H200", "H200"),
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA GH200 480GB", "GH200"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA A10G", None),  # AWS's variant: no NVIDIA data sheet, and not an A10
        ("NVIDIA RTX A1000", None),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40", "L40"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("Tesla T4", "T4"),
        ("Tesla V100-SXM2-16GB", "V100"),
        ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", None),  # a slice of the GPU: not its peak
    ],
)
def test_exact_marketing_names_pick_their_own_entry(name, entry):
    assert table_entry(name) == entry


def test_every_entry_is_reached_by_its_own_name():
    # A general entry listed before a specific one would shadow it ("H200" before "H200 NVL").
    for pattern, _peaks in PEAK_TFLOPS:
        assert table_entry(f"NVIDIA {pattern}") == pattern


def test_h200_nvl_is_not_judged_by_the_sxm_peak():
    assert table_peak_flops("NVIDIA H200 NVL", "bf16") == 835e12
    assert table_peak_flops("NVIDIA H200", "bf16") == 989e12


# -- the math an fp32 step runs in -----------------------------------------------------------
@pytest.fixture
def restore_tf32():
    saved = (torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision)
    yield
    torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision = saved


def test_torch_defaults_read_as_tf32_convolutions_and_fp32_matmuls(restore_tf32):
    assert fp32_math(torch) == {"matmul": "fp32", "conv": "tf32"}


def test_the_users_tf32_settings_are_read_not_changed(restore_tf32):
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    torch.backends.cudnn.conv.fp32_precision = "ieee"
    assert fp32_math(torch) == {"matmul": "tf32", "conv": "fp32"}
    assert torch.backends.cuda.matmul.fp32_precision == "tf32"  # left as the user set it


def test_legacy_float32_matmul_precision_counts_as_tf32(restore_tf32):
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")
        assert fp32_math(torch)["matmul"] == "tf32"
    finally:
        torch.set_float32_matmul_precision(before)


def test_convolution_and_matmul_flops_are_counted_apart():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(4 * 6 * 6, 5))
    x, y = torch.randn(2, 3, 8, 8), torch.randint(0, 5, (2,))
    kinds = count_step_flops_by_kind(model, x, y, nn.functional.cross_entropy)
    # forward + backward (input and weight gradients; the first layer's input needs none):
    conv_fwd = 2 * 2 * 4 * 6 * 6 * 3 * 3 * 3
    linear_fwd = 2 * 2 * 144 * 5
    assert kinds == {"conv": conv_fwd * 2, "matmul": linear_fwd * 3}
    assert count_step_flops(model, x, y, nn.functional.cross_entropy) == sum(kinds.values())


def test_fp32_peak_follows_the_math_each_kind_ran_in():
    a100 = ["NVIDIA A100-SXM4-80GB"]
    conv_only = {"conv": 10, "matmul": 0}
    # TF32 convolutions (torch's default): the TF32 peak, not FP32's 19.5 (8x lower).
    peak, _ = peak_flops(
        device_type="cuda",
        device_names=a100,
        dtype="fp32",
        environ={},
        maths=math_mode("fp32", {"conv": "tf32", "matmul": "fp32"}),
        flops_by_kind=conv_only,
    )
    assert peak == 156e12
    # A mix: the FLOP-weighted harmonic mean (time at each kind's own peak).
    mixed = {"conv": 3, "matmul": 1}
    peak, _ = peak_flops(
        device_type="cuda",
        device_names=a100,
        dtype="fp32",
        environ={},
        maths={"conv": "tf32", "matmul": "fp32"},
        flops_by_kind=mixed,
    )
    assert peak == pytest.approx(4 / (3 / 156e12 + 1 / 19.5e12))
    # autocast: both kinds in bf16, whatever the TF32 switches say.
    assert math_mode("bf16", {"conv": "tf32", "matmul": "fp32"}) == {"conv": "bf16", "matmul": "bf16"}
    peak, _ = peak_flops(
        device_type="cuda",
        device_names=a100,
        dtype="bf16",
        environ={},
        maths=math_mode("bf16", None),
        flops_by_kind=mixed,
    )
    assert peak == 312e12


# -- distinct GPUs across hosts --------------------------------------------------------------
def _rank(gpus: dict, *, dtype="fp32") -> dict:
    return {
        "compute_dtype": dtype,
        "gpus": gpus,
        "fp32_math": {"conv": "tf32", "matmul": "fp32"},
        "flops_by_kind": {"conv": 0, "matmul": 100},
        "model_flops_per_step": 100,
        "tokens_per_step": None,
        "compute_only_times": None,
        "memory": {},
        "compile_time_s": None,
    }


def test_the_same_local_label_on_two_hosts_is_two_gpus():
    h100 = "NVIDIA H100 80GB HBM3"
    node0 = {"GPU-aaaa": {"device": "cuda:0", "host": "n0", "name": h100}}
    node1 = {"GPU-bbbb": {"device": "cuda:0", "host": "n1", "name": h100}}
    shared = {"GPU-aaaa": {"device": "cuda:0", "host": "n0", "name": h100}}  # a second rank on n0's GPU
    out = combine(
        [_rank(node0), _rank(shared), _rank(node1)],
        device_type="cuda",
        options=CommonOptions(precision="fp32", optimizer="sgd"),
        environ={},
    )
    assert out["peak_flops_per_s"] == 2 * 67e12  # two GPUs, not one (and not three)
    assert out["gpu_keys"] == ["GPU-aaaa", "GPU-bbbb"]
    assert out["math_mode"] == {"conv": "tf32", "matmul": "fp32"}


def test_worker_keys_gpus_by_uuid_else_host_and_device(monkeypatch):
    """The worker side, with a fake torch.cuda: the key names the physical GPU, not the label."""
    import socket
    from types import SimpleNamespace

    from dpbench.strategies.profiling import gpu_keys

    uuids = {"cuda:0": "9f1c", "cuda:1": None}  # None: a torch without .uuid
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: SimpleNamespace(uuid=uuids[d]))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d: f"NVIDIA H100 PCIe ({d})")
    host = socket.gethostname()
    assert gpu_keys(["cuda:0", "cuda:1"]) == {
        "GPU-9f1c": {"device": "cuda:0", "host": host, "name": "NVIDIA H100 PCIe (cuda:0)"},
        f"{host}/cuda:1": {"device": "cuda:1", "host": host, "name": "NVIDIA H100 PCIe (cuda:1)"},
    }
