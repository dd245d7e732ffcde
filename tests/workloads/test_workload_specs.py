"""Workload specs: parsing, registered names with overrides, MODULE:ATTR and file.py:ATTR, bad input."""

from __future__ import annotations

import pytest
import torch
from _user_models import SOURCE

from dpbench.workloads import (
    SpecError,
    Workload,
    get_workload,
    parameter_count,
    parse_spec,
    resolve_workload,
    split_specs,
)


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    """A user's my_models.py in the working directory, as `dpbench run --workload my_models:…` sees it."""
    (tmp_path / "my_models.py").write_text(SOURCE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    import sys

    sys.modules.pop("my_models", None)


@pytest.mark.parametrize(
    "text, kind, target, attr, overrides",
    [
        ("mlp", "name", "mlp", "", {}),
        ("mlp@hidden=64,layers=1", "name", "mlp", "", {"hidden": 64, "layers": 1}),
        ("my_models:tiny_net@hidden=8,lr=0.5,act=tanh,bias=false", "module", "my_models", "tiny_net",
         {"hidden": 8, "lr": 0.5, "act": "tanh", "bias": False}),
        ("pkg.sub:build", "module", "pkg.sub", "build", {}),
        ("models/net.py:tiny", "file", "models/net.py", "tiny", {}),
        ("net.py:tiny@x=none", "file", "net.py", "tiny", {"x": None}),
        ("hf:gpt2@n_layer=2,seq_len=16", "hf", "gpt2", "", {"n_layer": 2, "seq_len": 16}),
        ("hf:./configs/tiny", "hf", "./configs/tiny", "", {}),
    ],
)  # fmt: skip
def test_specs_parse_into_kind_target_attribute_and_typed_overrides(text, kind, target, attr, overrides):
    spec = parse_spec(text)
    assert (spec.kind, spec.target, spec.attr, spec.overrides) == (kind, target, attr, overrides)
    assert parse_spec(spec.canonical) == parse_spec(spec.canonical)  # the canonical form parses back the same
    assert parse_spec(spec.canonical).overrides == overrides


@pytest.mark.parametrize(
    "text, message",
    [
        ("mlp@hidden", "expected overrides as key=value,key=value, found 'hidden'"),
        ("mlp@hidden=1,hidden=2", "override 'hidden' is given twice"),
        ("mod:not-an-identifier", "expected MODULE:ATTR or path/to/file.py:ATTR"),
        ("hf:", "expected hf:MODEL_TYPE or hf:PATH"),
        ("", "expected a non-empty string"),
    ],
)
def test_malformed_specs_are_refused_in_one_line(text, message):
    with pytest.raises(SpecError, match=message) as info:
        parse_spec(text)
    assert "\n" not in str(info.value)


def test_a_comma_list_splits_into_specs_and_key_value_items_continue_the_spec_before():
    assert split_specs("mlp, lenet") == ("mlp", "lenet")
    assert split_specs("hf:gpt2@n_layer=2,n_embd=64,mlp,my:net,hidden=3") == (
        "hf:gpt2@n_layer=2,n_embd=64",
        "mlp",
        "my:net@hidden=3",
    )


def test_a_registered_name_resolves_to_the_registered_workload_and_overrides_call_its_factory():
    assert resolve_workload("mlp").name == "mlp"
    assert resolve_workload("mlp").model == get_workload("mlp").model
    small = resolve_workload("mlp@hidden=64,layers=1")
    assert small.name == "mlp-hidden64-layers1"
    assert small.params["spec"] == "mlp@hidden=64,layers=1"
    assert parameter_count(small) == 784 * 64 + 64 + 64 * 10 + 10
    assert resolve_workload("resnet18@widths=8x16x32x64").params["widths"] == [8, 16, 32, 64]
    assert resolve_workload("mlp@global_batch=12").global_batch == 12


def test_unknown_names_and_overrides_list_close_names():
    with pytest.raises(SpecError, match=r"Unknown workload 'mpl'\. Available names: .*\(did you mean 'mlp'\?\)"):
        resolve_workload("mpl")
    with pytest.raises(SpecError, match=r"no argument of mlp_workload \(did you mean 'hidden'\?\); known arguments"):
        resolve_workload("mlp@hiden=3")
    with pytest.raises(SpecError, match="hidden must be >= 1, got 0"):
        resolve_workload("mlp@hidden=0")
    with pytest.raises(SpecError, match="global_batch: expected an int >= 1, found 0"):
        resolve_workload("mlp@global_batch=0")


def test_a_module_factory_resolves_with_its_overrides_and_is_named_by_its_spec(user_dir):
    workload = resolve_workload("my_models:tiny_net@hidden=8,depth=3")
    assert isinstance(workload, Workload)
    assert workload.name == "my_models:tiny_net@hidden=8,depth=3"
    assert workload.params == {"hidden": 8, "depth": 3, "workload_name": "tiny", "spec": workload.name}
    assert parameter_count(workload) == (8 * 8 + 8) + 2 * (8 * 8 + 8) + (3 * 8 + 8) + (8 + 1)
    (x, z), target = workload.batch(0, 5, 1)
    assert x.shape == (5, 8) and z.shape == (5, 3)
    torch.manual_seed(0)
    loss = workload.loss(workload.model()(x, z), target)
    assert loss.dim() == 0 and loss.item() > 0


def test_a_file_spec_imports_the_file_by_its_path(user_dir, monkeypatch):
    (user_dir / "sub").mkdir()
    (user_dir / "my_models.py").rename(user_dir / "sub" / "models_file.py")
    workload = resolve_workload("sub/models_file.py:fixed")
    assert workload.name == "sub/models_file.py:fixed"
    assert workload.params["hidden"] == 4
    monkeypatch.chdir(user_dir / "sub")
    assert resolve_workload("models_file.py:tiny_net@depth=1").params["depth"] == 1


@pytest.mark.parametrize(
    "spec, message",
    [
        ("no_such_module_xyz:net", r"cannot import 'no_such_module_xyz': No module named 'no_such_module_xyz'"),
        ("my_models:tiny", r"module 'my_models' has no attribute 'tiny'; its Workload attributes: fixed, tiny_net$"),
        ("my_models:not_a_workload", r"not_a_workload is a int, expected a dpbench.Workload or a callable"),
        ("my_models:returns_int", r"returns_int\(\) returned a int, expected a dpbench.Workload"),
        ("my_models:tiny_net@hiden=3", r"'hiden' is no argument of tiny_net \(did you mean 'hidden'\?\); known"),
        ("my_models:fixed@hidden=3", r"fixed is a Workload, which takes no overrides"),
        ("missing/file.py:net", r"expected a Python file, found no file 'missing/file.py'"),
    ],
)  # fmt: skip
def test_bad_user_specs_say_what_is_wrong_in_one_line(user_dir, spec, message):
    with pytest.raises(SpecError, match=message) as info:
        resolve_workload(spec)
    assert "\n" not in str(info.value)


FAILING = """
import torch
from torch import nn

import dpbench


class Broken(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 1)

    def forward(self, x):
        raise RuntimeError("my model is broken")


def broken():
    return dpbench.Workload(model=Broken, batch=lambda step, n, seed: (torch.ones(n, 4), torch.ones(n, 1)))
"""


@pytest.mark.slow
def test_a_model_failing_in_its_first_step_reports_the_workers_traceback_under_its_spec(tmp_path, monkeypatch):
    import dpbench
    from dpbench.workers import WorkerError

    (tmp_path / "failing_models.py").write_text(FAILING)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(WorkerError) as info:
        with dpbench.launch("ddp", "failing_models:broken", world_size=2, global_batch=4, timeout=60) as run:
            run.step(1)
    assert "(while training workload failing_models:broken)" in info.value.__notes__
    assert "my model is broken" in info.value.worker_traceback
