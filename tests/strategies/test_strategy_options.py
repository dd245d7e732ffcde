"""The new options: defaults everywhere, and every bad value refused before any process starts."""

from __future__ import annotations

import psutil
import pytest
from _toy_workloads import MLP

import dpbench
from dpbench.strategies import StrategyUnavailable, get_strategy, list_strategies

COMPILE_STRATEGIES = {"single", "ddp", "fsdp"}


def test_every_strategy_takes_optimizer_and_precision_and_three_take_compile():
    for name in list_strategies():
        defaults = get_strategy(name).option_defaults
        assert defaults["optimizer"] == "sgd" and defaults["precision"] == "fp32", name
        assert ("compile" in defaults) == (name in COMPILE_STRATEGIES), name
        if name in COMPILE_STRATEGIES:
            assert defaults["compile"] is False
    assert get_strategy("fsdp").option_defaults == {
        "reshard_after_forward": True,
        "shard": "block",
        "replicate": 1,
        "units": None,
        "mixed_precision": None,
        "cpu_offload": False,
        "checkpoint": False,
        "compile": False,
        "optimizer": "sgd",
        "precision": "fp32",
    }
    assert get_strategy("zero").option_defaults == {
        "bucket_cap_mb": None,
        "overlap_with_ddp": False,
        "checkpoint": False,
        "optimizer": "sgd",
        "precision": "fp32",
    }


BAD = [
    ("ddp", 2, {"optimizer": "adam"}, ValueError, "ddp option optimizer must be one of sgd, adamw, got 'adam'"),
    (
        "single",
        1,
        {"precision": "fp8"},
        ValueError,
        "single option precision must be one of fp32, bf16, fp16, got 'fp8'",
    ),
    ("dp", 2, {"precision": "fp16"}, StrategyUnavailable, "dp option precision='fp16' needs device='cuda'"),
    ("fsdp", 2, {"precision": "fp16"}, StrategyUnavailable, "fsdp option precision='fp16' needs device='cuda'"),
    ("single", 1, {"compile": "yes"}, ValueError, "single option compile must be True or False, got 'yes'"),
    ("manual", 2, {"compile": True}, ValueError, "Unknown option(s) 'compile' for strategy 'manual'"),
    ("fsdp", 2, {"shard": "blocks"}, ValueError, "fsdp option shard must be one of block, layer, model, got 'blocks'"),
    (
        "fsdp",
        2,
        {"reshard_after_forward": 3},
        ValueError,
        "fsdp option reshard_after_forward: expected True, False or a number of ranks that divides the world size 2, "
        "found 3",
    ),
    (
        "fsdp",
        2,
        {"mixed_precision": "int8"},
        ValueError,
        "fsdp option mixed_precision must be None, 'PARAM' or 'PARAM/REDUCE' with each of bf16, fp16, fp32",
    ),
    ("fsdp", 2, {"mixed_precision": "bf16/fp32/fp32"}, ValueError, "fsdp option mixed_precision must be None"),
    (
        "fsdp",
        2,
        {"mixed_precision": "fp16"},
        StrategyUnavailable,
        "fsdp option mixed_precision with fp16 needs device='cuda'",
    ),
    ("fsdp", 2, {"cpu_offload": True}, StrategyUnavailable, "fsdp option cpu_offload=True needs device='cuda'"),
    ("zero", 2, {"bucket_cap_mb": 0}, ValueError, "zero option bucket_cap_mb must be None or a positive number, got 0"),
    ("zero", 2, {"overlap_with_ddp": "no"}, ValueError, "zero option overlap_with_ddp must be True or False, got 'no'"),
    (
        "zero",
        2,
        {"overlap_with_ddp": True},
        StrategyUnavailable,
        "zero option overlap_with_ddp=True needs the nccl backend",
    ),
    (
        "zero",
        2,
        {"gradient_as_bucket_view": True},
        ValueError,
        "Unknown option(s) 'gradient_as_bucket_view' for strategy 'zero'",
    ),
]


def _children() -> set[int]:
    return {child.pid for child in psutil.Process().children(recursive=True)}


@pytest.mark.parametrize(
    "strategy,world,options,exc,message",
    BAD,
    ids=[f"{b[0]}-{'-'.join(f'{k}={v}' for k, v in b[2].items())}" for b in BAD],
)
def test_bad_options_are_refused_before_any_process_starts(strategy, world, options, exc, message):
    before = _children()
    with pytest.raises(exc) as caught:
        dpbench.launch(strategy, MLP, world_size=world, global_batch=11, **options)
    assert message in str(caught.value)
    if exc is StrategyUnavailable:
        assert caught.value.reason == str(caught.value)
    assert _children() <= before  # nothing was started


def test_compile_without_a_compiler_is_refused_with_the_reason(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no cc, gcc, clang or g++
    monkeypatch.delenv("CXX", raising=False)
    for strategy, world in (("single", 1), ("ddp", 2), ("fsdp", 2)):
        with pytest.raises(StrategyUnavailable, match=r"compile=True needs a C compiler.*none of cc, gcc, clang"):
            dpbench.launch(strategy, MLP, world_size=world, global_batch=11, compile=True)


def test_compile_on_cpu_needs_the_cxx_compiler_inductor_calls(monkeypatch, tmp_path):
    fake_cc = tmp_path / "cc"
    fake_cc.write_text("#!/bin/sh\n")
    fake_cc.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))  # a C compiler, but no C++ one
    monkeypatch.setenv("CXX", "missing-c++")
    with pytest.raises(StrategyUnavailable, match=r"inductor calls \(CXX or g\+\+: 'missing-c\+\+'\)"):
        dpbench.launch("single", MLP, world_size=1, global_batch=11, compile=True)


@pytest.mark.slow
def test_resolved_options_are_recorded_with_their_defaults():
    with dpbench.launch("zero", MLP, world_size=2, global_batch=11, optimizer="adamw") as run:
        assert run.info.options == {
            "bucket_cap_mb": None,
            "overlap_with_ddp": False,
            "checkpoint": False,
            "optimizer": "adamw",
            "precision": "fp32",
        }
