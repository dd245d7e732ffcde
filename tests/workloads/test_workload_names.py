"""Size variants of a workload have their own names and record their sizes in ``params``."""

from __future__ import annotations

import json

import pytest

from dpbench.workloads import (
    dict_model_workload,
    fashion_mnist_workload,
    get_workload,
    lenet_workload,
    mlp_workload,
    register_workload,
    resnet18_workload,
    transformer_workload,
    unregister_workload,
)

DEFAULT_PARAMS = {
    "mlp": (mlp_workload, {"hidden": 1024, "layers": 3, "noise": 0.5}),
    "lenet": (lenet_workload, {"conv1": 20, "conv2": 50, "hidden": 128, "noise": 0.5}),
    "resnet18": (resnet18_workload, {"widths": [64, 128, 256, 512], "blocks_per_stage": 2, "noise": 0.5}),
    "transformer": (
        transformer_workload,
        {"vocab": 512, "context": 64, "layers": 2, "heads": 4, "d_model": 64, "branching": 4},
    ),
    "dict_model": (dict_model_workload, {"hidden": 256, "noise": 0.5}),
}


@pytest.mark.parametrize("name", sorted(DEFAULT_PARAMS))
def test_defaults_keep_the_plain_name_and_record_every_size(name):
    factory, params = DEFAULT_PARAMS[name]
    workload = factory()
    assert (workload.name, workload.params) == (name, params)
    assert get_workload(name).params == params
    # Passing the defaults explicitly is the same workload, so the same name.
    assert factory(**params).name == name


@pytest.mark.parametrize(
    "workload, name",
    [
        (mlp_workload(hidden=128, layers=2), "mlp-hidden128-layers2"),
        (mlp_workload(layers=2, hidden=128), "mlp-hidden128-layers2"),  # argument order does not matter
        (mlp_workload(hidden=128), "mlp-hidden128"),
        (mlp_workload(noise=0.25), "mlp-noise0.25"),
        (lenet_workload(conv2=16), "lenet-conv2_16"),  # a key ending in a digit gets "_" before its value
        (lenet_workload(conv1=8, hidden=64), "lenet-conv1_8-hidden64"),
        (resnet18_workload(widths=(8, 16, 32, 64)), "resnet18-widths8x16x32x64"),
        (transformer_workload(d_model=32, heads=2), "transformer-heads2-d_model32"),
        (dict_model_workload(hidden=64), "dict_model-hidden64"),
    ],
)
def test_variants_are_named_by_their_non_default_sizes(workload, name):
    assert workload.name == name


def test_variant_params_record_the_sizes_as_json():
    workload = resnet18_workload(widths=(8, 16, 32, 64), blocks_per_stage=1)
    assert workload.params == {"widths": [8, 16, 32, 64], "blocks_per_stage": 1, "noise": 0.5}
    assert json.loads(json.dumps(workload.params)) == workload.params


def test_distinct_sizes_never_share_a_name():
    variants = [mlp_workload(hidden=h, layers=n) for h in (64, 128, 1024) for n in (1, 2, 3)]
    assert len({w.name for w in variants}) == len(variants)


def test_a_variant_registers_beside_the_built_in_and_the_built_in_name_needs_replace():
    variant = mlp_workload(hidden=128, layers=2)
    try:
        register_workload(variant)
        assert get_workload("mlp-hidden128-layers2") is variant
        assert get_workload("mlp").params["hidden"] == 1024
    finally:
        unregister_workload(variant.name)
    builtin = get_workload("mlp")
    with pytest.raises(ValueError, match="A workload named 'mlp' is already registered; pass replace=True"):
        register_workload(mlp_workload())
    assert get_workload("mlp") is builtin


def test_fashion_mnist_names_its_model_and_split(tmp_path):
    from test_fashion_mnist import random_split, write_split

    write_split(tmp_path, *random_split(4), train=True)
    write_split(tmp_path, *random_split(4), train=False)
    train, test = (
        fashion_mnist_workload(tmp_path, model="mlp"),
        fashion_mnist_workload(tmp_path, model="mlp", train=False),
    )
    assert (train.name, train.params) == ("fashion_mnist_mlp", {"model": "mlp", "split": "train"})
    assert (test.name, test.params) == ("fashion_mnist_mlp-test", {"model": "mlp", "split": "test"})
