"""What a GPU user meets first, refused on CPU before any process with one line: the bf16 comm hook
over gloo on a shared GPU, torch.compile without Python.h or a findable libcuda; and dp/manual
replicas sharing one GPU say they ran serially."""

from __future__ import annotations

from types import SimpleNamespace

import psutil
import pytest
from _toy_workloads import MLP

import dpbench
from dpbench.strategies import CommonOptions, StrategyUnavailable, _options, ddp, get_strategy
from dpbench.strategies.base import Strategy


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


# -- finding 5: ddp comm_hook="bf16" needs nccl, i.e. one GPU per rank -----------------------------
@pytest.mark.parametrize("gpus,refused", [(1, True), (2, False)])
def test_bf16_comm_hook_is_refused_when_ranks_share_a_gpu(monkeypatch, gpus, refused):
    monkeypatch.setattr(ddp, "_cuda_count", lambda: gpus)
    options = {"comm_hook": "bf16"}
    if not refused:
        get_strategy("ddp").resolve_options(options, device="cuda", world_size=2, global_batch=16)
        return
    with pytest.raises(StrategyUnavailable) as caught:
        get_strategy("ddp").resolve_options(options, device="cuda", world_size=2, global_batch=16)
    assert str(caught.value) == (
        "ddp option comm_hook='bf16' needs device='cuda' and one GPU per rank (the nccl backend: torch "
        "requires NCCL 2.10+ for it; 2 ranks on 1 GPU(s) would run gloo)"
    )


def test_fp16_comm_hook_still_runs_over_gloo_on_a_shared_gpu(monkeypatch):
    monkeypatch.setattr(ddp, "_cuda_count", lambda: 1)
    resolved = get_strategy("ddp").resolve_options({"comm_hook": "fp16"}, device="cuda", world_size=2, global_batch=16)
    assert resolved["comm_hook"] == "fp16"


# -- finding 9: compile=True needs Python.h, and on CUDA a libcuda Triton can find -------------------
def test_compile_without_python_h_is_refused_before_any_process(monkeypatch, tmp_path):
    monkeypatch.setattr(_options, "python_header", lambda: tmp_path / "include" / "Python.h")
    before = _children()
    with pytest.raises(StrategyUnavailable) as caught:
        dpbench.launch("single", MLP, world_size=1, global_batch=11, compile=True)
    assert str(caught.value) == (
        "single option compile=True needs Python's C headers (torch.compile's generated code includes "
        f"Python.h), but {tmp_path / 'include' / 'Python.h'} is missing: install the python3-dev package for "
        "this Python"
    )
    assert _children() <= before


def test_compile_on_cuda_without_libcuda_is_refused(monkeypatch, tmp_path):
    header = tmp_path / "Python.h"
    header.write_text("")
    monkeypatch.setattr(_options, "python_header", lambda: header)
    monkeypatch.setattr(_options, "libcuda_found", lambda: False)
    with pytest.raises(StrategyUnavailable, match=r"^ddp option compile=True on CUDA needs a libcuda.so.1 Triton"):
        _options.check_compiler("ddp", device="cuda")
    _options.check_compiler("ddp", device="cpu")  # CPU's inductor needs no libcuda


def _fake_ldconfig(directory, listing: str):
    directory.mkdir()
    tool = directory / "ldconfig"
    tool.write_text(f"#!/bin/sh\nprintf '%s\\n' '{listing}'\n")
    tool.chmod(0o755)
    return directory


def test_libcuda_is_found_where_triton_looks(monkeypatch, tmp_path):
    empty = _fake_ldconfig(tmp_path / "none", "1 libs found in cache")
    monkeypatch.setenv("PATH", str(empty))
    assert _options.libcuda_found({}) is False
    driver = tmp_path / "driver"
    driver.mkdir()
    (driver / "libcuda.so.1").write_text("")
    assert _options.libcuda_found({"TRITON_LIBCUDA_PATH": str(driver)}) is True
    assert _options.libcuda_found({"LD_LIBRARY_PATH": f"/nowhere:{driver}"}) is True
    cached = _fake_ldconfig(tmp_path / "cached", "libcuda.so.1 (libc6,x86-64) => /usr/lib/libcuda.so.1")
    monkeypatch.setenv("PATH", str(cached))
    assert _options.libcuda_found({}) is True


# -- finding 10: in-process replicas sharing a GPU run on one stream, one after another --------------
@pytest.mark.parametrize(
    "devices,multiprocess,expected",
    [
        (("cuda:0", "cuda:0"), False, "serial: 2 replicas share cuda:0 on one stream"),
        (("cuda:0", "cuda:1"), False, None),
        (("cpu", "cpu"), False, None),
        (("cuda:0", "cuda:0"), True, None),  # processes: one CUDA context each, not one stream
    ],
)
def test_replicas_sharing_a_gpu_are_reported_serial(devices, multiprocess, expected):
    trainer = SimpleNamespace(spec=SimpleNamespace(devices=devices), multiprocess=multiprocess)
    note = Strategy.replica_concurrency(trainer)
    if expected is None:
        assert note is None
    else:
        assert note.startswith(expected) and "overhead, not concurrency" in note


def test_dp_and_manual_are_the_in_process_strategies():
    assert not get_strategy("dp").multiprocess and not get_strategy("manual").multiprocess
    assert get_strategy("ddp").multiprocess


def test_the_serial_note_reaches_the_case_metrics():
    from dpbench.strategies.profiling import combine

    rank = {
        "compute_dtype": "fp32",
        "gpus": {"GPU-1": {"device": "cuda:0", "host": "h", "name": "NVIDIA H200"}},
        "fp32_math": {"conv": "tf32", "matmul": "fp32"},
        "flops_by_kind": None,
        "model_flops_per_step": 100,
        "tokens_per_step": None,
        "compute_only_times": None,
        "memory": {},
        "compile_time_s": None,
        "replica_concurrency": "serial: 2 replicas share cuda:0 on one stream",
    }
    out = combine([rank], device_type="cuda", options=CommonOptions(precision="fp32", optimizer="sgd"), environ={})
    assert out["replica_concurrency"] == "serial: 2 replicas share cuda:0 on one stream"
