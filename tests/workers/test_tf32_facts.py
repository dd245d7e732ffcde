"""The worker's facts say what fp32 matmuls run at and record the variables that decide it:
NGC's images set ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1``, which a torch from before its per-backend
TF32 API (2.9) ORs into the switch it hands cuBLAS, so that its matmuls run in TF32 while
``torch.get_float32_matmul_precision()`` still reads "highest"."""

from __future__ import annotations

import os

import torch

from dpbench.strategies._metrics import fp32_math
from dpbench.workers.worker import worker_facts

OVERRIDE = "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"


class _PreApiMatmul:
    """``torch.backends.cuda.matmul`` of a torch before 2.9, as its C++ answers: no
    ``fp32_precision``, and ``allow_tf32`` reads ``allowTF32CuBLAS()``, which is the override read
    from the environment or a setting other than "highest"."""

    @property
    def allow_tf32(self) -> bool:
        return os.environ.get(OVERRIDE) == "1" or torch.get_float32_matmul_precision() != "highest"


def test_the_override_makes_the_facts_say_tf32_and_records_it(monkeypatch):
    monkeypatch.setenv(OVERRIDE, "1")
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "1")
    monkeypatch.setattr(torch.backends.cuda, "matmul", _PreApiMatmul())
    monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: "highest")  # what such a torch reads
    facts = worker_facts(0, "cpu", None)
    assert facts["float32_matmul_precision"] == "high"  # TF32, though the setting reads "highest"
    assert facts["tf32_override"] == "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1"
    assert {k: facts["env"][k] for k in (OVERRIDE, "NVIDIA_TF32_OVERRIDE")} == {
        OVERRIDE: "1",
        "NVIDIA_TF32_OVERRIDE": "1",
    }
    # The case metrics' math (the peak an fp32 step is judged by) reads the same switch.
    assert fp32_math(torch)["matmul"] == "tf32"


def test_without_the_override_the_setting_is_what_the_facts_report(monkeypatch):
    monkeypatch.delenv(OVERRIDE, raising=False)
    monkeypatch.delenv("NVIDIA_TF32_OVERRIDE", raising=False)
    monkeypatch.setattr(torch.backends.cuda, "matmul", _PreApiMatmul())
    monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: "highest")
    facts = worker_facts(0, "cpu", None)
    assert facts["float32_matmul_precision"] == "highest" and facts["tf32_override"] is None
    assert OVERRIDE not in facts["env"] and "NVIDIA_TF32_OVERRIDE" not in facts["env"]


def test_a_torch_that_read_no_override_at_load_reports_its_own_setting(monkeypatch):
    # torch 2.9+ reads the variable once, when it loads, as the default precision: this process
    # loaded without it, so its matmuls stay IEEE; the variable the worker sees is still recorded.
    monkeypatch.setenv(OVERRIDE, "1")
    facts = worker_facts(0, "cpu", None)
    assert facts["float32_matmul_precision"] == torch.get_float32_matmul_precision() == "highest"
    assert facts["tf32_override"] == "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1" and facts["env"][OVERRIDE] == "1"
