"""The workload registry: names, lookups, the unknown-name message, register / replace."""

from __future__ import annotations

import functools

import pytest

import dpbench
from dpbench.workloads import (
    UnknownWorkloadError,
    Workload,
    get_workload,
    list_workloads,
    register_workload,
    unregister_workload,
)
from dpbench.workloads.base import cross_entropy
from dpbench.workloads.data import image_batch
from dpbench.workloads.mlp import MLP

DEFAULT_NAMES = ["dict_model", "lenet", "mlp", "resnet18", "transformer"]


def _tiny_workload(name: str, hidden: int = 8) -> Workload:
    return Workload(
        model=functools.partial(MLP, hidden=hidden, layers=1), batch=image_batch, loss=cross_entropy, name=name
    )


@pytest.fixture
def scratch_name():
    name = "test-registry-scratch"
    yield name
    if name in list_workloads():
        unregister_workload(name)


def test_default_names_are_registered_and_sorted():
    assert list_workloads() == DEFAULT_NAMES
    assert dpbench.list_workloads() == DEFAULT_NAMES


@pytest.mark.parametrize("name", DEFAULT_NAMES)
def test_get_workload_returns_the_named_workload(name):
    workload = get_workload(name)
    assert isinstance(workload, Workload)
    assert workload.name == name
    assert dpbench.get_workload(name) is workload
    assert isinstance(dpbench.Workload, type) and dpbench.Workload is Workload


def test_unknown_name_lists_available_names():
    with pytest.raises(KeyError) as info:
        get_workload("resnet50")
    message = str(info.value)
    assert message == "Unknown workload 'resnet50'. Available names: " + ", ".join(DEFAULT_NAMES)
    # The same error is a ValueError too, for callers that validate arguments that way.
    assert isinstance(info.value, ValueError) and isinstance(info.value, UnknownWorkloadError)


def test_non_string_name_is_a_type_error():
    with pytest.raises(TypeError, match="workload name must be a str, got int"):
        get_workload(3)


def test_register_get_and_unregister(scratch_name):
    workload = register_workload(_tiny_workload(scratch_name))
    assert scratch_name in list_workloads()
    assert get_workload(scratch_name) is workload
    assert unregister_workload(scratch_name) is workload
    assert scratch_name not in list_workloads()
    with pytest.raises(KeyError, match="Unknown workload 'test-registry-scratch'"):
        unregister_workload(scratch_name)


def test_register_existing_name_needs_replace(scratch_name):
    first = register_workload(_tiny_workload(scratch_name, hidden=8))
    second = _tiny_workload(scratch_name, hidden=16)
    with pytest.raises(ValueError, match="already registered; pass replace=True"):
        register_workload(second)
    assert get_workload(scratch_name) is first
    register_workload(second, replace=True)
    assert get_workload(scratch_name) is second


def test_register_rejects_non_workload_and_a_blank_name_is_refused_at_construction():
    with pytest.raises(TypeError, match="workload must be a dpbench.Workload, got dict"):
        register_workload({"name": "x"})
    with pytest.raises(ValueError, match="Workload.name must be a non-empty str"):
        _tiny_workload("  ")


def _local_factory_workload(name: str) -> Workload:
    def factory():  # a local function: not picklable
        return MLP(hidden=4, layers=1)

    return Workload(model=factory, batch=image_batch, name=name)


def test_register_rejects_unpicklable_workload(scratch_name):
    with pytest.raises(TypeError, match="Workload.model of workload 'test-registry-scratch' is not picklable"):
        register_workload(_local_factory_workload(scratch_name))
    assert scratch_name not in list_workloads()
