"""A convergence case's fingerprint keeps a clean configuration in and a different step out.

A TF32 convolution rounds its input to 10 mantissa bits: a per-step difference of ~1e-7 in the
losses, which ~2,000 SGD steps from a small initialisation (d2l's LeNet recipe: 2,350) grow past
1e-4 in the parameters. Trained here in process, with the recipe's own batches of the packaged
digits (a small convolutional net, standardised inputs so the rounding bites from the first
convolution): a clean run, the same run with every convolution's input rounded as TF32 rounds it
(the low 13 mantissa bits masked), and a run whose gradient is scaled by 2 (two ranks' means added,
not averaged). Each is recorded by :func:`dpbench.measure.convergence.convergence_fingerprint` and
judged by :func:`dpbench.results.fingerprint.compare_fingerprints`, as a run's report judges them.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dpbench.launcher.step_stats import StepStats
from dpbench.measure.cases import PROBE_STEPS
from dpbench.measure.convergence import convergence_fingerprint
from dpbench.results.fingerprint import FingerprintStatus, compare_fingerprints
from dpbench.strategies.fingerprint import parameter_sums
from dpbench.workloads.digits import digits_unavailable
from dpbench.workloads.recipes import get_recipe
from dpbench.workloads.splits import epoch_batch

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(digits_unavailable() is not None, reason=str(digits_unavailable())),
]

STEPS = 2000
BATCH = 32
LR = 0.2
INIT_STD = 0.03  # small weights: training leaves a saddle, which amplifies differences as d2l's does
TF32_DROPPED_BITS = 0x1FFF  # fp32 keeps 23 mantissa bits, TF32 10


def _tf32(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` rounded towards zero to TF32's mantissa; the gradient passes through unchanged."""
    rounded = (tensor.detach().view(torch.int32) & ~TF32_DROPPED_BITS).view(torch.float32)
    return tensor + (rounded - tensor.detach())


class _Conv(nn.Conv2d):
    tf32 = False

    def _conv_forward(self, x, weight, bias):
        return super()._conv_forward(_tf32(x) if self.tf32 else x, weight, bias)


def _net(*, tf32: bool) -> nn.Module:
    conv = _Conv(1, 4, 3, padding=1)
    conv.tf32 = tf32
    net = nn.Sequential(conv, nn.ReLU(), nn.AvgPool2d(2), nn.Flatten(), nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 10))
    with torch.no_grad():
        for name, param in net.named_parameters():
            param.zero_() if name.endswith("bias") else param.normal_(0.0, INIT_STD)
    return net


def _standardised(x: torch.Tensor) -> torch.Tensor:
    return (x - 0.3) / 0.4  # the digits' pixels over 16: mean ~0.3, std ~0.4


def _sums(net: nn.Module, step: int) -> dict:
    named = [(n, p.detach()) for n, p in net.named_parameters()]
    return {"step": step, **parameter_sums(named), "precision": "fp32", "exempt": None, "rank_spread": 0.0}


def _train(*, tf32: bool = False, grad_scale: float = 1.0) -> tuple[dict, dict]:
    """``(the convergence fingerprint, the same with its sums taken after the last step)``."""
    train, test = get_recipe("digits-mlp").splits()
    torch.manual_seed(0)
    net = _net(tf32=tf32)
    optimizer = torch.optim.SGD(net.parameters(), lr=LR)
    losses = []
    for step in range(STEPS):
        x, y = epoch_batch(step, BATCH, 0, split=train)
        loss = nn.functional.cross_entropy(net(_standardised(x)), y)
        optimizer.zero_grad()
        (loss * grad_scale).backward()
        optimizer.step()
        losses.append(float(loss.detach()))
        if step + 1 == PROBE_STEPS:
            probe = _sums(net, PROBE_STEPS)
    images, labels = test.load()
    with torch.no_grad():
        accuracy = float((net(_standardised(test.inputs(images))).argmax(dim=1) == labels).float().mean())
    stats = [StepStats(step_times=[0.0] * STEPS, global_batch=BATCH, losses=losses)]
    tolerance = get_recipe("digits-mlp").parity_tolerance
    record = convergence_fingerprint(probe, stats, final_test_accuracy=accuracy, accuracy_tolerance=tolerance)
    return record, {**record, **_sums(net, STEPS)}


@pytest.fixture(scope="module")
def clean():
    with torch.random.fork_rng(devices=[]):
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # one reduction order for every run
        try:
            yield _train(), _train(tf32=True), _train(grad_scale=2.0)
        finally:
            torch.set_num_threads(threads)


def test_a_run_with_tf32_sized_differences_matches_after_thousands_of_steps(clean):
    (reference, reference_at_end), (tf32, tf32_at_end), _ = clean
    verdict = compare_fingerprints(tf32, reference)
    assert verdict.status is FingerprintStatus.MATCHES, verdict.reason
    assert verdict.compared_steps == 8 and "final test accuracy" in verdict.reason
    # What the parameters after the last step would have said: a clean run left out.
    # (The sum or the sum of squares, whichever departs first: that turns on the rounding of the CPU's
    # vector kernels, and it differed between two machines this suite ran on, with the same code.)
    late = compare_fingerprints(tf32_at_end, reference_at_end)
    assert late.status is FingerprintStatus.DEPARTS
    assert late.where in (f"parameter sum after step {STEPS}", f"parameter sum of squares after step {STEPS}")


def test_a_gradient_scaled_twice_departs_from_its_first_steps(clean):
    (reference, _), _, (doubled, _) = clean
    verdict = compare_fingerprints(doubled, reference)
    assert verdict.status is FingerprintStatus.DEPARTS and verdict.departure > 10 * verdict.tolerance.relative
    assert verdict.where.endswith(f"after step {PROBE_STEPS}") or verdict.where.startswith("loss at step")
