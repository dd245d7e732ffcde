"""dpbench.strategies._metrics: FLOPs counted by torch against a hand count, peaks, and the derived metrics."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch
from torch import nn

from dpbench.measure.derive import derive
from dpbench.strategies._metrics import (
    PEAK_ENV,
    count_step_flops,
    env_peak_flops,
    local_bytes,
    measure_matmul_flops,
    peak_flops,
    table_peak_flops,
)


def linear_stack(widths: list[int], *, bias: bool) -> nn.Module:
    layers: list[nn.Module] = []
    for a, b in zip(widths, widths[1:]):
        layers += [nn.Linear(a, b, bias=bias), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def hand_count(batch: int, widths: list[int]) -> int:
    """A Linear a→b on B rows: forward 2·B·a·b; backward 2·B·a·b for the weight gradient and
    2·B·a·b for the input gradient — except the first layer, whose input needs no gradient."""
    total = 0
    for index, (a, b) in enumerate(zip(widths, widths[1:])):
        matmul = 2 * batch * a * b
        total += matmul + matmul + (matmul if index > 0 else 0)
    return total


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("widths,batch", [([12, 16, 5], 11), ([784, 256, 256, 10], 64)])
def test_flops_of_a_linear_stack_match_the_hand_count(widths, batch, bias):
    torch.manual_seed(0)
    model = linear_stack(widths, bias=bias)
    x = torch.randn(batch, widths[0])
    y = torch.randint(0, widths[-1], (batch,))
    flops = count_step_flops(model, x, y, nn.functional.cross_entropy)
    assert flops == hand_count(batch, widths)


def test_flops_scale_with_the_batch_and_count_tuple_inputs():
    class TwoInputs(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(4, 3), nn.Linear(6, 3)

        def forward(self, x, z):
            return self.a(x) + self.b(z)

    model = TwoInputs()
    counts = []
    for batch in (5, 10):
        inputs = (torch.randn(batch, 4), torch.randn(batch, 6))
        counts.append(count_step_flops(model, inputs, torch.randint(0, 3, (batch,)), nn.functional.cross_entropy))
    # Forward + weight gradients of both layers (inputs need no gradient).
    assert counts[0] == 2 * (2 * 5 * 4 * 3 + 2 * 5 * 6 * 3)
    assert counts[1] == 2 * counts[0]


def test_flops_under_bf16_autocast_are_the_same_count():
    model = linear_stack([12, 16, 5], bias=True)
    x, y = torch.randn(7, 12), torch.randint(0, 5, (7,))
    plain = count_step_flops(model, x, y, nn.functional.cross_entropy)
    cast = count_step_flops(
        model, x, y, nn.functional.cross_entropy, autocast=torch.autocast("cpu", dtype=torch.bfloat16)
    )
    assert plain == cast == hand_count(7, [12, 16, 5])


def test_table_peaks_pick_the_specific_name_first():
    assert table_peak_flops("NVIDIA H100 80GB HBM3", "bf16") == 989e12
    assert table_peak_flops("NVIDIA H100 PCIe", "bf16") == 756e12
    assert table_peak_flops("NVIDIA H200", "fp32") == 67e12
    assert table_peak_flops("NVIDIA A100-SXM4-80GB", "fp16") == 312e12
    assert table_peak_flops("NVIDIA L40S", "fp32") == pytest.approx(91.6e12)
    assert table_peak_flops("Tesla V100-SXM2-16GB", "bf16") is None  # no bf16 tensor cores
    assert table_peak_flops("Some Future GPU", "bf16") is None


def test_peak_sums_over_gpus_and_the_env_overrides_the_table():
    assert peak_flops(device_type="cuda", device_names=["NVIDIA A100-SXM4-80GB"] * 2, dtype="bf16", environ={}) == (
        624e12,
        "table:NVIDIA A100-SXM4-80GB",
    )
    assert peak_flops(
        device_type="cuda", device_names=["NVIDIA A100"] * 2, dtype="bf16", environ={PEAK_ENV: "100"}
    ) == (200e12, f"env:{PEAK_ENV}")
    # On CPU the env is the whole CPU's peak; without it the caller measures (None here).
    assert peak_flops(device_type="cpu", device_names=[], dtype="fp32", environ={PEAK_ENV: "0.5"}) == (
        0.5e12,
        f"env:{PEAK_ENV}",
    )
    assert peak_flops(device_type="cpu", device_names=[], dtype="fp32", environ={}) == (None, None)
    assert peak_flops(device_type="cuda", device_names=["Unknown GPU"], dtype="fp32", environ={}) == (None, None)


@pytest.mark.parametrize("raw", ["fast", "0", "-3", "nan", "inf"])
def test_a_bad_peak_env_is_a_clear_error(raw):
    with pytest.raises(ValueError, match=rf"{PEAK_ENV} must be a positive number of TFLOP/s per device, got '{raw}'"):
        env_peak_flops({PEAK_ENV: raw})


def test_cpu_matmul_peak_is_positive_and_finite():
    rate = measure_matmul_flops(n=256, window_s=0.02, windows=2)
    assert math.isfinite(rate) and rate > 1e8  # any CPU multiplies faster than 0.1 GFLOP/s
    assert measure_matmul_flops(n=128, parallel=2, window_s=0.02, windows=1) > 0


def test_local_bytes_counts_each_tensor_once():
    a = torch.zeros(10)
    b = torch.zeros(3, dtype=torch.float64)
    assert local_bytes([a, b, a]) == 10 * 4 + 3 * 8
    assert local_bytes([]) == 0 and local_bytes([torch.zeros(0)]) == 0


METRICS = {
    "model_flops_per_step": 4e9,
    "peak_flops_per_s": 1e11,
    "tokens_per_step": 4096,
    "compute_only_step_s": 0.08,
    "collective_time_s": 0.05,
}


def test_derive_mfu_tokens_and_exposed_communication():
    out = derive(METRICS, step_time_s=0.1, world_size=2)
    assert out["achieved_flops_per_s"] == pytest.approx(4e10)
    assert out["mfu"] == pytest.approx(0.4)
    assert out["tokens_per_s"] == pytest.approx(40960) and out["tokens_per_s_per_replica"] == pytest.approx(20480)
    assert out["exposed_comm_s"] == pytest.approx(0.02)
    assert out["overlap_fraction"] == pytest.approx((0.05 - 0.02) / 0.05)
    json.dumps(out)  # plain floats


def test_derive_clamps_and_leaves_out_what_does_not_apply():
    faster_than_compute = derive({**METRICS, "compute_only_step_s": 0.2}, step_time_s=0.1, world_size=2)
    assert faster_than_compute["exposed_comm_s"] == 0.0 and faster_than_compute["overlap_fraction"] == 1.0
    all_exposed = derive({**METRICS, "collective_time_s": 0.001}, step_time_s=0.1, world_size=2)
    assert all_exposed["overlap_fraction"] == 0.0
    # Achieved above the peak: the peak is wrong for this machine, so no MFU (achieved stays).
    above = derive({**METRICS, "peak_flops_per_s": 1e9}, step_time_s=0.1, world_size=2)
    assert above["mfu"] is None and above["achieved_flops_per_s"] == pytest.approx(4e10)
    empty = derive({"compute_only_step_s": None, "tokens_per_step": None}, step_time_s=0.1, world_size=1)
    assert all(value is None for value in empty.values())
    assert all(value is None for value in derive(METRICS, step_time_s=math.nan, world_size=2).values())
    no_total = derive({**METRICS, "collective_time_s": None}, step_time_s=0.1, world_size=2)
    assert no_total["exposed_comm_s"] == pytest.approx(0.02) and no_total["overlap_fraction"] is None


def test_derive_needs_no_torch():
    code = (
        "import sys; from dpbench.measure.derive import derive; "
        "print(derive({'model_flops_per_step': 1.0, 'peak_flops_per_s': 2.0}, step_time_s=1.0, world_size=1)['mfu']); "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["0.5", "False"]
