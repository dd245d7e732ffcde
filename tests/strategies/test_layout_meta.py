"""``dpbench.strategies.layout.meta_layout``: a workload's parameters, buffers and FSDP units as the
step model cuts them, built on the meta device — against the model torch builds for real."""

from __future__ import annotations

import pytest

from dpbench.strategies.layout import meta_layout
from dpbench.workloads import resolve_workload


def test_the_layout_is_the_models_parameters_in_definition_order():
    model = resolve_workload("resnet18").model()
    layout = meta_layout("resnet18")
    assert layout.sizes == tuple(p.numel() * 4 for p in model.parameters() if p.requires_grad)
    assert layout.buffer_bytes == sum(b.numel() * b.element_size() for b in model.buffers())
    assert sum(layout.unit_sizes) == layout.param_bytes and len(layout.unit_sizes) > 1
    assert layout.origin.startswith("resnet18 built on the meta device (")


def test_a_spec_that_cannot_be_built_is_one_line():
    with pytest.raises(ValueError) as exc:
        meta_layout("no_such_workload")
    assert "\n" not in str(exc.value) and "no_such_workload" in str(exc.value)


@pytest.mark.slow
def test_transformers_resnet_configs_have_torchvisions_parameter_counts():
    pytest.importorskip("transformers")
    assert meta_layout("hf:resnet@num_labels=1000").param_bytes == 4 * 25_557_032
    assert meta_layout("hf:resnet@num_labels=1000,depths=3x4x23x3").param_bytes == 4 * 44_549_160
