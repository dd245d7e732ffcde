"""torch-dp refuses bf16 on >= 2 GPUs, before any process starts, because torch's DataParallel
would silently compute in float16. The mechanism is shown on CPU: autocast's dtype does not
follow a thread, and torch's parallel_apply re-enters autocast without it."""

from __future__ import annotations

import inspect
import threading

import pytest
import torch

from dpbench.strategies import get_strategy
from dpbench.strategies.base import StrategyUnavailable


def _resolve(**options):
    return get_strategy("torch-dp").resolve_options(
        options, device="cuda", world_size=options.pop("w", 2), global_batch=8
    )


def test_bf16_on_two_replicas_is_refused_with_the_reason():
    with pytest.raises(StrategyUnavailable, match=r"precision='bf16'.*float16.*parallel_apply"):
        _resolve(precision="bf16")


def test_one_replica_and_the_other_precisions_are_allowed():
    assert _resolve(precision="bf16", w=1)["precision"] == "bf16"  # one replica: the calling thread
    assert _resolve(precision="fp16")["precision"] == "fp16"  # CUDA's default dtype: what runs
    assert _resolve(precision="fp32")["precision"] == "fp32"


def test_autocast_dtype_is_thread_local_so_enabled_alone_loses_it():
    layer, replica_layer = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)  # apart: autocast caches weight casts
    x = torch.randn(2, 4)
    seen = {}

    def replica(enabled):  # what parallel_apply's _worker does: enabled (read by the caller), no dtype
        with torch.amp.autocast("cpu", enabled=enabled):
            seen["dtype"] = replica_layer(x).dtype

    with torch.autocast("cpu", dtype=torch.float16):
        assert layer(x).dtype == torch.float16
        thread = threading.Thread(target=replica, args=(torch.is_autocast_enabled("cpu"),))
        thread.start()
        thread.join()
    assert seen["dtype"] == torch.get_autocast_dtype("cpu") == torch.bfloat16  # the default, not fp16


def test_torch_parallel_apply_still_drops_the_dtype():
    # When torch passes the dtype on, this fails: then lift the refusal in strategies/torch_dp.py.
    from torch.nn.parallel import parallel_apply

    source = inspect.getsource(parallel_apply)
    assert "autocast(device_type, enabled=autocast_enabled)" in source
