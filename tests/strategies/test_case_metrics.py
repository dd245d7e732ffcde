"""Run.case_metrics(): memory per rank, FLOPs, peaks, compute-only time and collective time.

The model is six equal 32→32 Linear layers, so an even split exists: DDP ranks hold every
byte, FSDP ranks half of each parameter, ZeRO ranks half of the optimizer state (three
weights and three biases each).
"""

from __future__ import annotations

import json
import statistics

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import dpbench
from dpbench.measure.derive import derive
from dpbench.strategies._metrics import count_step_flops
from dpbench.workloads.base import Workload

WIDTH, LAYERS, BATCH = 32, 6, 12


def stack() -> nn.Module:
    layers: list[nn.Module] = []
    for _ in range(LAYERS):
        layers += [nn.Linear(WIDTH, WIDTH), nn.Tanh()]
    return nn.Sequential(*layers[:-1])


def batch(step: int, global_batch: int, seed: int):
    gen = torch.Generator().manual_seed(seed * 1009 + step)
    return torch.randn(global_batch, WIDTH, generator=gen), torch.randint(0, WIDTH, (global_batch,), generator=gen)


def loss(output, target):
    return F.cross_entropy(output, target)


STACK = Workload(model=stack, batch=batch, loss=loss, name="equal-stack")
PARAM_BYTES = LAYERS * (WIDTH * WIDTH + WIDTH) * 4
PARAM_COUNT = 2 * LAYERS
# FlopCounterMode counts the matmuls: forward 2·B·W² per layer; backward the weight gradient of
# every layer and the input gradient of all but the first (its input needs none): 17 × 2·B·W².
STEP_FLOPS = (LAYERS + LAYERS + (LAYERS - 1)) * 2 * BATCH * WIDTH * WIDTH
# AdamW: exp_avg and exp_avg_sq like each parameter, plus a float32 step counter per parameter.
ADAMW_BYTES = 2 * PARAM_BYTES + 4 * PARAM_COUNT


def measure(strategy: str, world_size: int, workload=STACK, global_batch: int = BATCH, **options):
    with dpbench.launch(
        strategy,
        workload,
        world_size=world_size,
        global_batch=global_batch,
        seed=1,
        lr=0.05,
        optimizer="adamw",
        **options,
    ) as run:
        stats = run.step(3)
        metrics = run.case_metrics()
    json.dumps(metrics)  # JSON-safe as it is
    return metrics, statistics.median(stats.step_times)


@pytest.fixture(scope="module")
def ddp2():
    return measure("ddp", 2)


@pytest.fixture(scope="module")
def fsdp2():
    return measure("fsdp", 2)


@pytest.fixture(scope="module")
def zero2():
    return measure("zero", 2)


@pytest.mark.slow
def test_ddp_ranks_each_hold_every_parameter_gradient_and_state_byte(ddp2):
    memory = ddp2[0]["memory_per_rank"]
    assert [m["rank"] for m in memory] == [0, 1]
    for m in memory:
        assert m["params_bytes"] == m["grads_bytes"] == PARAM_BYTES
        assert m["optimizer_state_bytes"] == ADAMW_BYTES
        assert m["peak_kind"] == "cpu_peak_rss" and m["peak_bytes"] > PARAM_BYTES


@pytest.mark.slow
def test_fsdp_ranks_each_hold_half_of_everything(fsdp2):
    memory = fsdp2[0]["memory_per_rank"]
    for m in memory:
        assert m["params_bytes"] == m["grads_bytes"] == PARAM_BYTES // 2
        # Half of each moment, but every rank keeps a step counter for every parameter.
        assert m["optimizer_state_bytes"] == PARAM_BYTES + 4 * PARAM_COUNT
    assert sum(m["params_bytes"] for m in memory) == PARAM_BYTES
    # A stack of Linear layers has no blocks: each top-level child with parameters is a unit, then the root.
    assert fsdp2[0]["shard_units"] == {
        "rule": "block",
        "found_by": "top-level children",
        "count": LAYERS + 1,
        "classes": ["Linear"],
        "largest_unit_bytes": (WIDTH * WIDTH + WIDTH) * 4,
    }


@pytest.mark.slow
def test_fsdp_at_three_ranks_holds_about_a_third_each():
    memory = measure("fsdp", 3, reshard_after_forward=False)[0]["memory_per_rank"]
    assert sum(m["params_bytes"] for m in memory) == PARAM_BYTES  # uneven shards: 11, 11, 10 rows
    one_row = LAYERS * (WIDTH + 1) * 4
    for m in memory:
        assert abs(m["params_bytes"] - PARAM_BYTES / 3) <= one_row
        assert abs(m["optimizer_state_bytes"] - ADAMW_BYTES / 3) <= 2 * one_row + 4 * PARAM_COUNT


@pytest.mark.slow
def test_zero_shards_only_the_optimizer_state(zero2):
    memory = zero2[0]["memory_per_rank"]
    for m in memory:
        assert m["params_bytes"] == m["grads_bytes"] == PARAM_BYTES  # DDP holds full params and grads
        assert m["optimizer_state_bytes"] == ADAMW_BYTES // 2
    assert sum(m["optimizer_state_bytes"] for m in memory) == ADAMW_BYTES


@pytest.mark.parametrize("fixture", ["ddp2", "fsdp2", "zero2"])
@pytest.mark.slow
def test_sync_strategies_report_flops_peak_compute_and_communication(fixture, request):
    metrics, step_time = request.getfixturevalue(fixture)
    x, y = batch(0, BATCH, 1)
    torch.manual_seed(1)
    assert metrics["model_flops_per_step"] == count_step_flops(stack(), x, y, loss) == STEP_FLOPS  # the global batch
    assert metrics["peak_source"] == "measured:cpu-matmul" and metrics["peak_flops_per_s"] > 0
    assert metrics["compute_dtype"] == "fp32" and metrics["precision"] == "fp32" and metrics["optimizer"] == "adamw"
    assert metrics["compute_only_step_s"] > 0 and metrics["collective_time_s"] > 0
    assert metrics["compile_time_s"] is None and metrics["tokens_per_step"] is None
    derived = derive(metrics, step_time_s=step_time, world_size=2)
    assert derived["achieved_flops_per_s"] == STEP_FLOPS / step_time
    assert derived["mfu"] == STEP_FLOPS / step_time / metrics["peak_flops_per_s"]
    exposed = max(0.0, step_time - metrics["compute_only_step_s"])
    assert derived["exposed_comm_s"] == exposed
    total = metrics["collective_time_s"]
    assert derived["overlap_fraction"] == min(1.0, max(0.0, (total - exposed) / total))


@pytest.mark.slow
def test_cases_that_share_the_cores_alike_are_judged_against_one_measured_cpu_peak(ddp2, fsdp2, zero2):
    # Two processes, one thread team each, the same affinity: the first case measured, the others
    # took its reading (independent readings differ: this VM's matmul rate moves by several %).
    from dpbench.launcher.run import _CPU_PEAKS

    def readings(processes: int) -> list[list[float]]:  # (processes, Python threads, torch threads, affinity)
        return [by_dtype["fp32"] for key, by_dtype in _CPU_PEAKS.items() if key[:2] == (processes, 1)]

    (peak,) = {m["peak_flops_per_s"] for m, _ in (ddp2, fsdp2, zero2)}
    assert [len(r) for r in readings(2) if sum(r) == peak] == [2]  # one reading per rank
    single, _ = measure("single", 1)  # one process: the cores shared otherwise, a reading of its own
    alone = single["peak_flops_per_s"]
    assert [len(r) for r in readings(1) if sum(r) == alone] == [1] and alone != peak


@pytest.mark.parametrize("strategy,world", [("single", 1), ("dp", 2)])
@pytest.mark.slow
def test_in_process_strategies_have_no_compute_only_or_collective_time(strategy, world):
    metrics, step_time = measure(strategy, world)
    assert metrics["compute_only_step_s"] is None and metrics["collective_time_s"] is None
    assert len(metrics["memory_per_rank"]) == 1 and metrics["memory_per_rank"][0]["params_bytes"] == PARAM_BYTES
    derived = derive(metrics, step_time_s=step_time, world_size=world)
    assert derived["exposed_comm_s"] is None and derived["overlap_fraction"] is None
    assert metrics["model_flops_per_step"] == STEP_FLOPS
    assert derived["mfu"] == STEP_FLOPS / step_time / metrics["peak_flops_per_s"]


@pytest.mark.slow
def test_token_workloads_report_tokens_per_step():
    metrics, step_time = measure("single", 1, workload="transformer", global_batch=4)
    assert metrics["tokens_per_step"] == 4 * 64  # batch × context of the registered transformer
    derived = derive(metrics, step_time_s=step_time, world_size=1)
    assert derived["tokens_per_s"] == pytest.approx(256 / step_time)


@pytest.mark.parametrize("strategy,options", [("fsdp", {}), ("zero", {}), ("ddp", {})])
@pytest.mark.slow
def test_case_metrics_leave_training_exactly_where_it_was(strategy, options):
    def train(with_metrics: bool):
        with dpbench.launch(
            strategy, STACK, world_size=2, global_batch=BATCH, seed=1, lr=0.05, optimizer="adamw", **options
        ) as run:
            run.step(2)
            if with_metrics:
                run.case_metrics()
            losses = run.step(2).losses
            return run.parameters(), losses

    params, losses = train(True)
    ref_params, ref_losses = train(False)
    assert losses == ref_losses
    for name, expected in ref_params.items():
        torch.testing.assert_close(params[name], expected, rtol=0, atol=0)
