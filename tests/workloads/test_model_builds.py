"""Before any process starts, each named workload's model is built on the meta device: a model its
own code cannot build is refused in one line naming the spec, the overrides and the exception; a
model that cannot be built on the meta device only is left to its launch."""

from __future__ import annotations

import pytest

from dpbench.workloads import SpecError, check_model_builds

SOURCE = """
import torch
from torch import nn
import dpbench


def _batch(step, global_batch, seed):
    return torch.zeros(global_batch, 4), torch.zeros(global_batch, dtype=torch.long)


class Broken(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(4, width)
        raise KeyError(f"no layer named {width}")


class ReadsValues(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
        self.scale = float(self.fc.weight.abs().max().item())  # a value: a meta tensor has none


def broken(width: int = 3):
    return dpbench.Workload(name="broken", model=lambda: Broken(width), batch=_batch)


reads_values = dpbench.Workload(name="reads", model=ReadsValues, batch=_batch)
fine = dpbench.Workload(name="fine", model=lambda: nn.Linear(4, 2), batch=_batch)
"""


@pytest.fixture
def module(tmp_path, monkeypatch):
    (tmp_path / "build_models.py").write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "build_models"
    import sys

    sys.modules.pop("build_models", None)


def test_a_model_whose_init_raises_is_refused_naming_spec_overrides_and_exception(module):
    with pytest.raises(SpecError) as info:
        check_model_builds("--workload", (f"{module}:fine", f"{module}:broken@width=5"))
    assert str(info.value) == (
        "--workload: workload spec 'build_models:broken@width=5': its model cannot be built with width=5: "
        "KeyError: 'no layer named 5'"
    )
    with pytest.raises(SpecError, match=r"'build_models:broken': its model cannot be built: KeyError"):
        check_model_builds("--workload", (f"{module}:broken",))


def test_models_that_build_or_fail_only_on_the_meta_device_pass(module):
    # ReadsValues builds on the CPU; on the meta device .item() has no value to read.
    check_model_builds("--workload", (f"{module}:fine", f"{module}:reads_values", "mlp"))
