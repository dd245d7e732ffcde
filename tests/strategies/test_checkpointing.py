"""Activation checkpointing per block (dpbench/strategies/checkpointing.py, the ``checkpoint``
option of every strategy): the same step as without it under single, ddp and fsdp; the parameters
keep their names; the peak it leaves, estimated without memory, against the one measured on real
tensors; a model without blocks refused before any process starts."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import pytest
import torch

import dpbench
from dpbench.strategies import get_strategy
from dpbench.strategies.activations import fake_step_peak, real_step_peak
from dpbench.strategies.checkpointing import checkpoint_blocks

K, GLOBAL_BATCH, LR = 3, 8, 0.05


def test_checkpointed_blocks_keep_their_class_name_and_parameter_names():
    model = dpbench.get_workload("transformer").model()
    names = [n for n, _ in model.named_parameters()]
    blocks = checkpoint_blocks(model)
    assert blocks == list(model.blocks) and [type(b).__name__ for b in blocks] == ["DecoderBlock"] * len(blocks)
    assert [n for n, _ in model.named_parameters()] == names
    swapped = type(blocks[0])
    checkpoint_blocks(model)  # twice: the same class, not a subclass of a subclass
    assert type(blocks[0]) is swapped and swapped.__mro__[1].__name__ == "DecoderBlock"


def test_a_model_without_blocks_is_refused_before_any_process_starts():
    with pytest.raises(ValueError, match=r"^checkpoint: the model has no blocks to recompute"):
        dpbench.launch("single", "mlp", world_size=1, global_batch=8, checkpoint=True)
    with pytest.raises(ValueError, match=r"single option checkpoint must be True or False, got 'yes'"):
        get_strategy("single").parse_options({"checkpoint": "yes"}, device="cpu", world_size=1, global_batch=8)


def train(strategy: str, world_size: int, **options):
    with dpbench.launch(
        strategy, "transformer", world_size=world_size, global_batch=GLOBAL_BATCH, seed=3, lr=LR, **options
    ) as run:
        stats = run.step(K)
        return run.parameters(), stats.losses


@pytest.mark.slow
def test_checkpointing_trains_the_same_steps_under_single_ddp_and_fsdp():
    reference, ref_losses = train("single", 1)
    for strategy, world in (("single", 1), ("ddp", 2), ("fsdp", 2)):
        params, losses = train(strategy, world, checkpoint=True)
        assert params.keys() == reference.keys()
        for name, expected in reference.items():
            torch.testing.assert_close(params[name], expected, atol=2e-5, rtol=1e-4, msg=f"{strategy}: {name}")
        torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), atol=2e-5, rtol=1e-4)


def _real(spec: str, batch: int, checkpoint: bool) -> int:
    return real_step_peak(dpbench.resolve_workload(spec), batch, checkpoint=checkpoint)


@pytest.mark.slow
def test_the_checkpointed_peak_is_estimated_within_ten_percent_and_below_the_plain_one():
    spec, batch = "transformer", 64
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        plain, checkpointed = pool.map(_real, [spec, spec], [batch, batch], [False, True])
    estimate = fake_step_peak(dpbench.resolve_workload(spec), batch, checkpoint=True)
    assert abs(estimate - checkpointed) <= 0.10 * checkpointed, (estimate, checkpointed)
    assert checkpointed < plain
