"""Where replicas go on CUDA machines of different sizes, checked on any machine by telling the
strategies how many GPUs there are (placement only counts devices; nothing touches CUDA)."""

from __future__ import annotations

import pytest
import torch

from dpbench.strategies import StrategyUnavailable, get_strategy


@pytest.fixture
def gpus(monkeypatch):
    def set_count(n: int) -> None:
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)

    return set_count


def placement(strategy: str, world_size: int, **options):
    cls = get_strategy(strategy)
    return cls.placement(world_size=world_size, device="cuda", options=cls.options_type(**options))


@pytest.mark.parametrize(
    "count, world, expected",
    [
        (1, 2, ("cuda:0", "cuda:0")),  # two replicas share the only GPU
        (2, 2, ("cuda:0", "cuda:1")),
        (2, 3, ("cuda:0", "cuda:0", "cuda:1")),  # as few per GPU as fit
        (4, 2, ("cuda:0", "cuda:1")),
    ],
)
def test_dp_spreads_replicas_and_shares_gpus_only_when_needed(gpus, count, world, expected):
    gpus(count)
    assert placement("dp", world).devices == expected


def test_dp_explicit_replicas_per_device_that_does_not_fit_is_an_error(gpus):
    gpus(1)
    with pytest.raises(ValueError, match="needs 2 CUDA devices, found 1"):
        placement("dp", 2, replicas_per_device=1)


def test_ddp_uses_nccl_with_a_gpu_per_rank_and_gloo_when_ranks_share(gpus):
    gpus(2)
    assert placement("ddp", 2).backend == "nccl"
    gpus(1)
    assert placement("ddp", 2).backend == "gloo"


def test_torch_dp_needs_one_gpu_per_replica(gpus):
    gpus(1)
    with pytest.raises(StrategyUnavailable, match="needs 2 CUDA devices"):
        placement("torch-dp", 2)
