"""The estimate of parameter, gradient and optimizer-state bytes per rank equals what a run measures.

Reference: ``memory_per_rank`` of ``Run.case_metrics()`` after one real step, for every strategy
this CPU runs × {SGD, AdamW} × world sizes 1–3 on mlp, transformer and two ``hf:`` workloads
(tiny configs). The fast tests check the rules on a model whose bytes are written out by hand.
"""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch
from torch import nn

import dpbench
from dpbench.strategies import get_strategy
from dpbench.strategies.estimate import EstimateError, Estimator
from dpbench.strategies.memory import fsdp_local_rows, model_params, parse_bytes
from dpbench.strategies.zero import zero_partition

HF_GPT2 = "hf:gpt2@n_layer=2,n_embd=32,n_head=2,vocab_size=257,n_positions=32,seq_len=16"
HF_LLAMA = (
    "hf:llama@num_hidden_layers=2,hidden_size=32,intermediate_size=64,num_attention_heads=2,"
    "num_key_value_heads=1,vocab_size=257,seq_len=16"
)
WORKLOADS = ["mlp", "transformer", HF_GPT2, HF_LLAMA]
CPU_STRATEGIES = ["single", "dp", "ddp", "manual", "allreduce", "fsdp", "zero"]  # torch-dp needs CUDA
GLOBAL_BATCH = 6
pytestmark = pytest.mark.usefixtures("hf_preloaded_helper")  # conftest.py says why


def toy() -> nn.Module:
    # 10×4 weight + 10 bias, then 3×10 weight (no bias): 40 + 10 + 30 = 80 float32 parameters.
    return nn.Sequential(nn.Linear(4, 10), nn.Tanh(), nn.Linear(10, 3, bias=False))


def state(strategy: str, world: int, optimizer: str, **options):
    with torch.device("meta"):
        params = model_params(toy())
    resolved = get_strategy(strategy).parse_options(
        {"optimizer": optimizer, **options}, device="cuda", world_size=world, global_batch=6
    )
    return [
        (s.params_bytes, s.grads_bytes, s.optimizer_state_bytes, s.comm_buffer_bytes)
        for s in get_strategy(strategy).memory_estimate(params, world_size=world, options=resolved)
    ]


def test_full_strategies_hold_everything_on_every_rank():
    # AdamW: two moments like each parameter and a 4-byte step per parameter (3 parameters).
    assert state("ddp", 2, "adamw") == [(320, 320, 640 + 12, 320)] * 2  # + DDP's buckets
    assert state("ddp", 2, "adamw", gradient_as_bucket_view=True) == [(320, 320, 652, 0)] * 2
    assert state("allreduce", 3, "sgd", mode="per-param") == [(320, 320, 0, 0)] * 3
    assert state("single", 1, "sgd") == [(320, 320, 0, 0)]
    assert state("dp", 3, "adamw") == [(320, 320, 652, 0)]  # one worker, replicas made per step
    assert state("manual", 3, "adamw") == [(960, 960, 3 * 652, 0)]  # one worker holding three replicas


def test_fsdp_shards_dim_zero_as_torch_chunk_does():
    # Rows per rank at world 3: weight 10 → 4, 4, 2; bias 10 → 4, 4, 2; weight 3 → 1, 1, 1.
    expected = [(4 * 4 + 4 + 10) * 4, (4 * 4 + 4 + 10) * 4, (2 * 4 + 2 + 10) * 4]
    got = state("fsdp", 3, "adamw")
    assert [g[0] for g in got] == [g[1] for g in got] == expected
    assert [g[2] for g in got] == [2 * e + 12 for e in expected]
    assert [fsdp_local_rows(1, 3, r) for r in range(3)] == [1, 0, 0]


def test_zero_partitions_largest_first_to_the_emptiest_rank():
    # 40 → rank 0, 30 → rank 1, 10 → rank 1 (30 < 40).
    with torch.device("meta"):
        params = model_params(toy())
    assert [[p.numel for p in own] for own in zero_partition(params, 2)] == [[40], [30, 10]]
    assert [s[2] for s in state("zero", 2, "adamw")] == [2 * 160 + 4, 2 * 160 + 8]  # a step counter each
    assert [s[2] for s in state("zero", 3, "adamw")] == [324, 244, 84]


def test_device_memory_sizes_parse_and_nonsense_is_refused():
    assert parse_bytes("80GB") == 80 * 10**9
    assert parse_bytes("80 GiB") == 80 * 2**30
    assert parse_bytes("8e10") == 8 * 10**10
    with pytest.raises(ValueError, match=r"^device memory: expected a positive size .* found 'lots'$"):
        parse_bytes("lots")


def _refuses_meta() -> nn.Module:
    if torch.empty(0).device.type == "meta":
        raise RuntimeError("no meta here\nsecond line")
    return toy()


def test_a_model_that_cannot_be_built_on_meta_is_one_line_with_the_spec():
    from dpbench.workloads import get_workload

    workload = dataclasses.replace(get_workload("mlp"), model=_refuses_meta, name="refuses-meta")
    with pytest.raises(EstimateError) as caught:
        Estimator(workload)
    assert str(caught.value) == (
        "workload 'refuses-meta': the model cannot be built on the meta device: RuntimeError: no meta here"
    )


def test_unknown_precision_and_optimizer_are_refused():
    estimator = Estimator("mlp", activations=False)
    with pytest.raises(EstimateError, match="precision: expected one of fp32, bf16, fp16, found 'fp8'"):
        estimator.case("ddp", world_size=2, global_batch=8, options={"precision": "fp8"})
    with pytest.raises(EstimateError, match="optimizer: expected one of sgd, adamw, found 'lion'"):
        estimator.case("ddp", world_size=2, global_batch=8, options={"optimizer": "lion"})
    with pytest.raises(ValueError, match="world_size must be 1"):
        estimator.case("single", world_size=2, global_batch=8)


def measured(strategy: str, spec: str, world: int, optimizer: str) -> list[tuple[int, int, int]]:
    with dpbench.launch(
        strategy, spec, world_size=world, global_batch=GLOBAL_BATCH, seed=1, lr=0.01, optimizer=optimizer
    ) as run:
        run.step(1)
        memory = run.case_metrics()["memory_per_rank"]
    return [(m["params_bytes"], m["grads_bytes"], m["optimizer_state_bytes"]) for m in memory]


@pytest.fixture(scope="module")
def estimators() -> dict[str, Estimator]:
    return {spec: Estimator(spec, activations=False) for spec in WORKLOADS}


# The suite runs a covering subset — every strategy on every workload at three ranks (uneven shards)
# with AdamW's state, single with both optimizers: 32 launches (even shards and SGD's empty state per
# rank are test_case_metrics.py's). The whole matrix (world sizes 1-3 × both optimizers, 152
# launches) is the validation run that docs/validation/memory.md records: DPBENCH_MEMORY_MATRIX=full.
FULL_MATRIX = os.environ.get("DPBENCH_MEMORY_MATRIX") == "full"
CASES = [
    (strategy, world, optimizer)
    for strategy in CPU_STRATEGIES
    for world in ((1,) if strategy == "single" else (1, 2, 3) if FULL_MATRIX else (3,))
    for optimizer in ("sgd", "adamw")
    if FULL_MATRIX or strategy == "single" or optimizer == "adamw"
]


@pytest.mark.slow
@pytest.mark.parametrize("spec", WORKLOADS, ids=["mlp", "transformer", "hf-gpt2", "hf-llama"])
@pytest.mark.parametrize("strategy,world,optimizer", CASES)
def test_estimate_equals_the_measured_memory_per_rank(estimators, spec, strategy, world, optimizer):
    case = estimators[spec].case(
        strategy, world_size=world, global_batch=GLOBAL_BATCH, options={"optimizer": optimizer}
    )
    estimate = [(r.params_bytes, r.grads_bytes, r.optimizer_state_bytes) for r in case.ranks]
    assert estimate == measured(strategy, spec, world, optimizer)


@pytest.mark.slow
def test_hsdp_estimate_equals_the_measured_memory_per_rank(estimators):
    """HSDP (fsdp replicate=2 at world size 4): each rank holds the shard of its pair, half of everything."""
    with dpbench.launch(
        "fsdp", "transformer", world_size=4, global_batch=8, seed=1, lr=0.01, optimizer="adamw", replicate=2
    ) as run:
        run.step(1)
        memory = run.case_metrics()["memory_per_rank"]
    case = estimators["transformer"].case(
        "fsdp", world_size=4, global_batch=8, options={"optimizer": "adamw", "replicate": 2}
    )
    assert [(r.params_bytes, r.grads_bytes, r.optimizer_state_bytes) for r in case.ranks] == [
        (m["params_bytes"], m["grads_bytes"], m["optimizer_state_bytes"]) for m in memory
    ]
    whole = sum(p.numel for p in estimators["transformer"].params) * 4
    assert [m["params_bytes"] for m in memory] == [whole // 2] * 4  # even shards of the transformer here
