"""A Workload refuses, at construction, parts the strategies could not use, naming the part."""

from __future__ import annotations

import functools
import json
import pickle
import re

import pytest
import torch
from torch import nn

from dpbench.workloads import Workload, get_workload
from dpbench.workloads.base import check_first_batch, cross_entropy
from dpbench.workloads.data import image_batch
from dpbench.workloads.mlp import MLP

MODEL_NEEDS = "a zero-argument callable that returns a new nn.Module"


def make_model():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 10))


def model_with_argument(hidden):
    return MLP(hidden=hidden, layers=1)


def batch_of_one_argument(step):
    return image_batch(step, 8, 0)


def loss_of_one_argument(output):
    return output.sum()


def test_a_module_instance_as_model_is_refused_naming_model():
    with pytest.raises(TypeError) as info:
        Workload(model=nn.Linear(784, 10), batch=image_batch)
    message = str(info.value)
    assert message.startswith(f"Workload.model must be {MODEL_NEEDS}"), message
    assert "got an nn.Module instance (Linear)" in message and "functools.partial" in message
    assert "\n" not in message


@pytest.mark.parametrize(
    "model, found",
    [
        (None, "got NoneType"),
        (model_with_argument, "model_with_argument needs argument 'hidden'"),
        (functools.partial(model_with_argument), "model_with_argument needs argument 'hidden'"),
    ],
)
def test_a_model_that_cannot_be_called_without_arguments_is_refused(model, found):
    with pytest.raises(TypeError, match=re.escape(f"Workload.model must be {MODEL_NEEDS}")) as info:
        Workload(model=model, batch=image_batch)
    assert found in str(info.value)


@pytest.mark.parametrize(
    "model", [make_model, MLP, functools.partial(model_with_argument, 8), functools.partial(MLP, hidden=8, layers=1)]
)
def test_functions_classes_and_partials_are_accepted_as_model(model):
    workload = Workload(model=model, batch=image_batch)
    assert isinstance(workload.model(), nn.Module)


@pytest.mark.parametrize(
    "batch, found",
    [
        (image_batch(0, 8, 0), "got tuple"),
        (nn.Linear(3, 3), "got an nn.Module instance (Linear)"),
        (batch_of_one_argument, "batch_of_one_argument cannot take 3 positional arguments"),
    ],
)
def test_a_batch_that_is_not_a_batch_function_is_refused_naming_batch(batch, found):
    with pytest.raises(
        TypeError, match=re.escape("Workload.batch must be a function batch(step, global_batch, seed)")
    ) as info:
        Workload(model=make_model, batch=batch)
    assert found in str(info.value)


def test_a_loss_module_is_accepted_and_a_loss_of_one_argument_is_refused():
    workload = Workload(model=make_model, batch=image_batch, loss=nn.CrossEntropyLoss())
    x, y = workload.batch(0, 4, 0)
    output = workload.model()(x)
    assert torch.equal(workload.loss(output, y), cross_entropy(output, y))
    with pytest.raises(TypeError, match=re.escape("Workload.loss must be a function loss(output, target)")) as info:
        Workload(model=make_model, batch=image_batch, loss=loss_of_one_argument)
    assert "loss_of_one_argument cannot take 2 positional arguments" in str(info.value)


@pytest.mark.parametrize("name", ["", "   ", 3])
def test_a_blank_or_non_string_name_is_refused(name):
    with pytest.raises((TypeError, ValueError), match="Workload.name must be a non-empty str"):
        Workload(model=make_model, batch=image_batch, name=name)


def test_params_are_kept_as_json_data():
    params = {"hidden": 8, "widths": (1, 2), "noise": 0.5, "split": "train", "nested": {"a": [1, (2, 3)]}}
    workload = Workload(model=make_model, batch=image_batch, params=params)
    assert workload.params == {
        "hidden": 8,
        "widths": [1, 2],
        "noise": 0.5,
        "split": "train",
        "nested": {"a": [1, [2, 3]]},
    }
    assert json.loads(json.dumps(workload.to_dict()))["params"] == workload.params
    params["hidden"] = 99  # the workload holds its own copy
    assert workload.params["hidden"] == 8
    assert pickle.loads(pickle.dumps(workload)).params == workload.params
    assert Workload(model=make_model, batch=image_batch).params == {}


@pytest.mark.parametrize(
    "params, found",
    [
        ({"model": nn.Linear(2, 2)}, "params['model'] is Linear"),
        ({"noise": float("nan")}, "params['noise'] is nan"),
        ({3: 1}, "key 3 is int"),
        ([("hidden", 8)], "got list"),
    ],
)
def test_params_that_are_not_json_data_are_refused(params, found):
    with pytest.raises(TypeError, match=re.escape("Workload.params must be a dict of JSON values")) as info:
        Workload(model=make_model, batch=image_batch, params=params)
    assert found in str(info.value)


# -- the first batch, checked in the parent before any worker starts ------------------------------
def short_batch(step, global_batch, seed):
    x, y = image_batch(step, global_batch, seed)
    return x[:61], y[:61]


def short_target(step, global_batch, seed):
    x, y = image_batch(step, global_batch, seed)
    return x, y[:-1]


def short_second_input(step, global_batch, seed):
    x, y = image_batch(step, global_batch, seed)
    return (x, y[:3]), y


def scalar_target(step, global_batch, seed):
    x, y = image_batch(step, global_batch, seed)
    return x, y.float().mean()


def not_a_pair(step, global_batch, seed):
    return image_batch(step, global_batch, seed)[0]


@pytest.mark.parametrize(
    "batch, found",
    [
        (short_batch, "short_batch returned 61 rows in inputs for global_batch=64"),
        (short_target, "short_target returned 63 rows in target for global_batch=64"),
        (short_second_input, "short_second_input returned 3 rows in inputs[1] for global_batch=64"),
        (functools.partial(short_batch), "short_batch returned 61 rows in inputs for global_batch=64"),
        (scalar_target, "scalar_target returned a 0-dim tensor (no rows) in target for global_batch=64"),
    ],
)
def test_a_batch_of_the_wrong_size_is_named_with_expected_and_actual(batch, found):
    workload = Workload(model=make_model, batch=batch, name="short")
    with pytest.raises(ValueError) as info:
        check_first_batch(workload, global_batch=64, seed=0)
    message = str(info.value)
    assert message.startswith("Workload.batch of workload 'short': ") and found in message, message
    assert "every tensor in inputs and target needs global_batch rows along dim 0" in message


def test_a_batch_that_is_not_an_inputs_target_pair_is_named():
    with pytest.raises(TypeError, match=re.escape("not_a_pair returned Tensor, expected an (inputs, target) pair")):
        check_first_batch(Workload(model=make_model, batch=not_a_pair), global_batch=8, seed=0)


@pytest.mark.parametrize("name", ["mlp", "lenet", "transformer", "dict_model", "resnet18"])
def test_registered_workloads_pass_the_first_batch_check(name):
    check_first_batch(get_workload(name), global_batch=5, seed=3)
