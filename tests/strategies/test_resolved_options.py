"""Saved results stay comparable: ``resolve_options`` gives the same dict, key for key and in the
same order, as before options became dataclasses.

The expected lists were produced by the dict-based ``resolve_options`` (before the options
dataclasses) and are what ``extra_info["options"]`` records (dpbench/measure/extra_info.py keeps
``run.info.options``, the resolved dict, as it is). Key order matters: results are JSON.
"""

from __future__ import annotations

import json
import pickle

import pytest

from dpbench.strategies import get_strategy

_DDP_DEFAULTS = [
    ("bucket_cap_mb", None),
    ("gradient_as_bucket_view", False),
    ("static_graph", False),
    ("find_unused_parameters", False),
    ("broadcast_buffers", True),
    ("sync_batchnorm", False),
    ("comm_hook", None),
    ("accumulation_steps", 1),
    ("checkpoint", False),
    ("compile", False),
    ("optimizer", "sgd"),
    ("precision", "fp32"),
]
_FSDP_DEFAULTS = [
    ("reshard_after_forward", True),
    ("shard", "block"),
    ("replicate", 1),
    ("units", None),
    ("mixed_precision", None),
    ("cpu_offload", False),
    ("checkpoint", False),
    ("compile", False),
    ("optimizer", "sgd"),
    ("precision", "fp32"),
]

# (strategy, device, world_size, requested options, resolved items); global_batch 11.
RECORDED = [
    ("single", "cpu", 1, {}, [("checkpoint", False), ("compile", False), ("optimizer", "sgd"), ("precision", "fp32")]),
    (
        "single",
        "cpu",
        1,
        {"precision": "bf16", "optimizer": "adamw"},
        [("checkpoint", False), ("compile", False), ("optimizer", "adamw"), ("precision", "bf16")],
    ),
    (
        "dp",
        "cpu",
        2,
        {},
        [
            ("chunk_sizes", None),
            ("replicas_per_device", None),
            ("checkpoint", False),
            ("optimizer", "sgd"),
            ("precision", "fp32"),
        ],
    ),
    (
        "dp",
        "cpu",
        2,
        {"replicas_per_device": 2, "chunk_sizes": [5, 6]},
        [
            ("chunk_sizes", [5, 6]),
            ("replicas_per_device", 2),
            ("checkpoint", False),
            ("optimizer", "sgd"),
            ("precision", "fp32"),
        ],
    ),
    ("torch-dp", "cuda", 2, {}, [("checkpoint", False), ("optimizer", "sgd"), ("precision", "fp32")]),
    (
        "torch-dp",
        "cuda",
        2,
        {"precision": "fp16"},
        [("checkpoint", False), ("optimizer", "sgd"), ("precision", "fp16")],
    ),
    ("ddp", "cpu", 2, {}, _DDP_DEFAULTS),
    (
        "ddp",
        "cpu",
        2,
        {"accumulation_steps": 2, "comm_hook": "fp16", "bucket_cap_mb": 25},
        [
            ("bucket_cap_mb", 25),
            ("gradient_as_bucket_view", False),
            ("static_graph", False),
            ("find_unused_parameters", False),
            ("broadcast_buffers", True),
            ("sync_batchnorm", False),
            ("comm_hook", "fp16"),
            ("accumulation_steps", 2),
            ("checkpoint", False),
            ("compile", False),
            ("optimizer", "sgd"),
            ("precision", "fp32"),
        ],
    ),
    ("manual", "cpu", 2, {}, [("checkpoint", False), ("optimizer", "sgd"), ("precision", "fp32")]),
    (
        "manual",
        "cpu",
        2,
        {"optimizer": "adamw"},
        [("checkpoint", False), ("optimizer", "adamw"), ("precision", "fp32")],
    ),
    (
        "allreduce",
        "cpu",
        2,
        {},
        [
            ("mode", "bucketed"),
            ("bucket_cap_mb", 25.0),
            ("checkpoint", False),
            ("optimizer", "sgd"),
            ("precision", "fp32"),
        ],
    ),
    (
        "allreduce",
        "cpu",
        2,
        {"bucket_cap_mb": 1, "mode": "overlap"},
        [("mode", "overlap"), ("bucket_cap_mb", 1), ("checkpoint", False), ("optimizer", "sgd"), ("precision", "fp32")],
    ),
    ("fsdp", "cpu", 2, {}, _FSDP_DEFAULTS),
    (
        "fsdp",
        "cpu",
        2,
        {"mixed_precision": "bf16/fp32", "shard": "model", "reshard_after_forward": False},
        [
            ("reshard_after_forward", False),
            ("shard", "model"),
            ("replicate", 1),
            ("units", None),
            ("mixed_precision", "bf16/fp32"),
            ("cpu_offload", False),
            ("checkpoint", False),
            ("compile", False),
            ("optimizer", "sgd"),
            ("precision", "fp32"),
        ],
    ),
    (
        "zero",
        "cpu",
        2,
        {},
        [
            ("bucket_cap_mb", None),
            ("overlap_with_ddp", False),
            ("checkpoint", False),
            ("optimizer", "sgd"),
            ("precision", "fp32"),
        ],
    ),
    (
        "zero",
        "cpu",
        2,
        {"optimizer": "adamw", "bucket_cap_mb": 10.5},
        [
            ("bucket_cap_mb", 10.5),
            ("overlap_with_ddp", False),
            ("checkpoint", False),
            ("optimizer", "adamw"),
            ("precision", "fp32"),
        ],
    ),
]


@pytest.mark.parametrize(
    "strategy,device,world_size,requested,expected",
    RECORDED,
    ids=[f"{case[0]}-{'-'.join(case[3]) or 'defaults'}" for case in RECORDED],
)
def test_resolved_options_are_what_results_have_always_recorded(strategy, device, world_size, requested, expected):
    resolved = get_strategy(strategy).resolve_options(
        dict(requested), device=device, world_size=world_size, global_batch=11
    )
    assert type(resolved) is dict
    assert list(resolved.items()) == expected
    # repr tells 25 from 25.0 and a list from a tuple, which == does not; JSON is what results hold.
    assert repr(list(resolved.items())) == repr(expected)
    assert json.dumps(resolved) == json.dumps(dict(expected))


def test_values_are_recorded_as_given_not_converted():
    resolved = get_strategy("dp").resolve_options({"chunk_sizes": (5, 6)}, device="cpu", world_size=2, global_batch=11)
    assert resolved["chunk_sizes"] == (5, 6) and type(resolved["chunk_sizes"]) is tuple


def test_option_defaults_are_the_resolved_defaults_and_read_only():
    for name, _device, _world_size, requested, expected in RECORDED:
        if not requested:
            defaults = get_strategy(name).option_defaults
            assert list(defaults.items()) == expected
            with pytest.raises(TypeError):
                defaults["optimizer"] = "adamw"  # type: ignore[index]


@pytest.mark.parametrize(
    "strategy,device,world_size,requested,expected",
    RECORDED,
    ids=[f"{case[0]}-{'-'.join(case[3]) or 'defaults'}" for case in RECORDED],
)
def test_parsed_options_are_the_strategys_dataclass_and_record_the_resolved_dict(
    strategy, device, world_size, requested, expected
):
    cls = get_strategy(strategy)
    parsed = cls.parse_options(dict(requested), device=device, world_size=world_size, global_batch=11)
    assert type(parsed) is cls.options_type
    assert list(parsed.as_dict().items()) == expected
    assert pickle.loads(pickle.dumps(parsed)) == parsed  # what a RunSpec carries to the workers


def test_the_estimate_takes_parsed_options_of_its_own_strategy_only():
    from dpbench.strategies.estimate import Estimator

    estimator = Estimator("mlp", activations=False)
    ddp = get_strategy("ddp").parse_options({"optimizer": "adamw"}, device="cpu", world_size=2, global_batch=8)
    by_name = estimator.case("ddp", world_size=2, global_batch=8, options={"optimizer": "adamw"})
    assert estimator.case("ddp", world_size=2, global_batch=8, options=ddp) == by_name
    with pytest.raises(TypeError, match="options: expected ZeroOptions, found DDPOptions"):
        estimator.case("zero", world_size=2, global_batch=8, options=ddp)
