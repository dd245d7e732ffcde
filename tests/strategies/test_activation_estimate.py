"""The activation peak estimated without memory is within 10% of the same forward + backward measured.

Reference: :func:`dpbench.strategies.activations.real_step_peak`, the same storage counter on real
CPU tensors, run in a fresh spawned process (no fake tensor machinery, no state of this one).
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import pytest
import torch

from dpbench.strategies.activations import LiveBytes, fake_step_peak, real_step_peak
from dpbench.workloads import resolve_workload

HF_GPT2 = "hf:gpt2@n_layer=2,n_embd=64,n_head=2,vocab_size=1000,n_positions=64,seq_len=32"
HF_T5 = "hf:t5@num_layers=2,num_decoder_layers=2,d_model=64,d_ff=128,num_heads=2,d_kv=32,vocab_size=1000,seq_len=32"
# Its __init__ reads the drop-path rates it computes: built on the meta device, then given fake storage.
HF_CONVNEXT = "hf:convnext@hidden_sizes=16x32,depths=2x2,num_stages=2,image_size=64"
# resnet18's layers at a sixteenth of its widths: activations ~90% of the peak (~70% at full width), and
# its real bf16 step ~15x cheaper on a CPU. benchmarks.memory_estimate checks the full widths.
RESNET18 = "resnet18@widths=16x32x64x128"
CASES = [("mlp", 64), ("lenet", 64), ("transformer", 8), (RESNET18, 32), (HF_GPT2, 8), (HF_T5, 8), (HF_CONVNEXT, 8)]


def test_the_counter_counts_new_storages_not_views_or_the_parameters():
    linear = torch.nn.Linear(128, 256)
    x = torch.randn(64, 128)
    with LiveBytes() as tracker:
        out = linear(x)  # the transposed weight is a view of a parameter: not counted
        assert tracker.live == 64 * 256 * 4
        view = out.view(-1)  # shares the output's storage
        assert tracker.live == 64 * 256 * 4
        del out, view
        assert tracker.live == 0
    assert tracker.peak == 64 * 256 * 4


def _real(spec: str, batch: int, precision: str) -> int:
    return real_step_peak(resolve_workload(spec), batch, precision=precision)


@pytest.fixture(scope="module")
def real_peaks() -> dict[tuple[str, int, str], int]:
    jobs = [(spec, batch, precision) for spec, batch in CASES for precision in ("fp32", "bf16")]
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return dict(zip(jobs, pool.map(_real, *zip(*jobs))))


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize(
    "spec,batch", CASES, ids=["mlp", "lenet", "transformer", "resnet18", "hf-gpt2", "hf-t5", "hf-convnext"]
)
def test_the_estimate_is_within_ten_percent_of_the_measured_step(real_peaks, spec, batch, precision):
    estimate = fake_step_peak(resolve_workload(spec), batch, precision=precision)
    measured = real_peaks[(spec, batch, precision)]
    assert abs(estimate - measured) <= 0.10 * measured, (estimate, measured)
