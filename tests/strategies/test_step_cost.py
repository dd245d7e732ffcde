"""The step's cost before launch: FLOPs counted on the meta device equal those counted on a real
step, and a workload whose single step would take long is said in one line with what dominates."""

from __future__ import annotations

import pytest
import torch

from dpbench.strategies._metrics import count_step_flops_by_kind
from dpbench.strategies.step_cost import StepCost, slow_step_line, step_cost
from dpbench.workloads import resolve_workload


# Attention on the meta device takes scaled_dot_product_attention's math path, whose backward the
# counter sees as more matmuls than the fused CPU kernel's: an estimate, within 15% of the real count.
@pytest.mark.parametrize("spec, tolerance", [("mlp", 0.0), ("transformer", 0.15)])
def test_meta_flops_match_a_real_steps(spec, tolerance):
    workload = resolve_workload(spec)
    inputs, target = workload.batch(0, 16, 0)
    real = sum(count_step_flops_by_kind(workload.model(), inputs, target, workload.loss).values())
    cost = step_cost(workload, 16, rate=1e9)
    assert cost is not None and real > 0 and abs(cost.flops / real - 1) <= tolerance
    assert cost.seconds == cost.flops / 1e9


def test_a_long_step_says_what_dominates_and_how_to_shrink_it():
    cost = StepCost(
        flops=82_000_000_000,
        rate=10e9,
        parameters=3_382_080,
        largest="wte.weight (50257×64)",
        largest_parameters=3_216_448,
    )
    assert slow_step_line("hf:gpt2@n_layer=2", cost, 64) == (
        "hf:gpt2@n_layer=2: a single step is about 82 GFLOP at global batch 64, at least 8.2 s on this machine "
        "(10 GFLOP/s measured); wte.weight (50257×64) holds 95% of its 3.38 M parameters; shrink it with "
        "@overrides of the model's size (e.g. a smaller vocabulary or width) or a smaller batch"
    )
    assert (
        slow_step_line("mlp", StepCost(flops=10**9, rate=10e9, parameters=1, largest="", largest_parameters=0), 64)
        is None
    )


def test_a_model_without_a_meta_path_is_left_to_its_launch():
    class NoMeta(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(2))

        def forward(self, x):
            return (x * self.w).sum() + float(self.w.detach().sum())  # reads a value: no meta tensor has one

    class Work:
        def model(self):
            return NoMeta()

        def batch(self, step, size, seed):
            return torch.ones(size, 2), torch.zeros(size)

        def loss(self, out, target):
            return out

    assert step_cost(Work(), 4, rate=1e9) is None
