"""What a GPU user meets first, refused on CPU before any process with one line: the bf16 comm hook
over gloo on a shared GPU, torch.compile without Python.h or a findable libcuda; and dp/manual
replicas sharing one GPU say they ran serially."""

from __future__ import annotations

import os
import sys
from pathlib import Path
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


# -- finding 9: compile=True needs Python.h, and on CUDA Triton and the libcuda file it links -------
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


def _fake_tools(directory, listing: str, *, compiler_answer: str = ""):
    """A directory for PATH with an ``ldconfig`` printing ``listing`` and a ``gcc`` answering
    ``-print-file-name=NAME`` with ``compiler_answer`` (or NAME itself: not on its library path)."""
    directory.mkdir()
    for name, body in (
        ("ldconfig", f"printf '%s\\n' '{listing}'"),
        ("gcc", f"answer='{compiler_answer}'; echo \"${{answer:-${{1#-print-file-name=}}}}\""),
    ):
        (directory / name).write_text(f"#!/bin/sh\n{body}\n")
        (directory / name).chmod(0o755)
    return directory


def _fake_triton(monkeypatch, site, libraries: str | None):
    """A Triton package whose NVIDIA driver module links ``libraries`` (its source line; None: no
    Triton at all), found first on sys.path; the parent reads it without importing it."""
    monkeypatch.delitem(sys.modules, "triton", raising=False)
    if libraries is None:
        monkeypatch.setattr(sys, "path", [p for p in sys.path if not Path(p, "triton").exists()])
        return
    driver = site / "triton" / "backends" / "nvidia"
    driver.mkdir(parents=True)
    (site / "triton" / "__init__.py").write_text("")
    (driver / "driver.py").write_text(f"import os\n\nlibraries = {libraries}\n\n\ndef libcuda_dirs():\n    pass\n")
    monkeypatch.syspath_prepend(str(site))


@pytest.fixture
def driver_only(monkeypatch, tmp_path):
    """The driver's libcuda.so.1 alone, as ldconfig lists it in an image without the dev symlink."""
    header = tmp_path / "Python.h"
    header.write_text("")
    monkeypatch.setattr(_options, "python_header", lambda: header)
    for name in ("TRITON_LIBCUDA_PATH", "LD_LIBRARY_PATH", "LIBRARY_PATH", "CC"):
        monkeypatch.delenv(name, raising=False)
    driver = tmp_path / "driver"
    driver.mkdir()
    (driver / "libcuda.so.1").write_text("")
    listing = f"libcuda.so.1 (libc6,x86-64) => {driver}/libcuda.so.1"
    monkeypatch.setenv("PATH", f"{_fake_tools(tmp_path / 'bin', listing)}:{os.environ['PATH']}")
    return driver


def test_compile_on_cuda_is_refused_where_triton_links_lcuda_and_only_libcuda_so_1_is_here(
    monkeypatch, tmp_path, driver_only
):
    _fake_triton(monkeypatch, tmp_path / "site", "['cuda']")  # Triton before triton-lang/triton#8668
    with pytest.raises(StrategyUnavailable) as caught:
        _options.check_compiler("ddp", device="cuda")
    assert str(caught.value) == (
        f"ddp option compile=True on CUDA needs libcuda.so for Triton's -lcuda link, but only libcuda.so.1 is "
        f"here ({driver_only}): link libcuda.so to it there or in a directory on LIBRARY_PATH"
    )
    _options.check_compiler("ddp", device="cpu")  # CPU's inductor needs no libcuda
    (driver_only / "libcuda.so").symlink_to(driver_only / "libcuda.so.1")  # the dev package's symlink
    _options.check_compiler("ddp", device="cuda")


def test_the_unversioned_libcuda_counts_where_the_linker_finds_it(monkeypatch, tmp_path, driver_only):
    _fake_triton(monkeypatch, tmp_path / "site", "['cuda']")
    elsewhere = tmp_path / "stubs"
    elsewhere.mkdir()
    (elsewhere / "libcuda.so").write_text("")
    link = _options.libcuda_link({"LIBRARY_PATH": f"/nowhere:{elsewhere}"})
    assert (link.flag, link.needs, link.found) == ("-lcuda", "libcuda.so", str(elsewhere / "libcuda.so"))
    assert _options.libcuda_link({}).found is None
    tools = _fake_tools(tmp_path / "cc", "", compiler_answer=str(elsewhere / "libcuda.so"))
    assert _options.libcuda_link({"CC": str(tools / "gcc")}).found == str(elsewhere / "libcuda.so")


def test_a_triton_that_links_libcuda_so_1_itself_needs_nothing_more(monkeypatch, tmp_path, driver_only):
    _fake_triton(monkeypatch, tmp_path / "site", "['libcuda.so.1']")
    link = _options.libcuda_link()
    assert link == _options.LibcudaLink(
        triton=True,
        flag="-l:libcuda.so.1",
        needs="libcuda.so.1",
        triton_dirs=(str(driver_only),),
        found=str(driver_only / "libcuda.so.1"),
    )
    assert link.refusal("ddp") is None
    _options.check_compiler("ddp", device="cuda")


def test_compile_on_cuda_without_triton_or_a_driver_triton_finds_is_refused(monkeypatch, tmp_path, driver_only):
    _fake_triton(monkeypatch, tmp_path / "site", None)
    assert _options.libcuda_link().refusal("ddp") == (
        "ddp option compile=True on CUDA needs Triton (torch.compile's CUDA backend), which this Python does not have"
    )
    _fake_triton(monkeypatch, tmp_path / "site", "['libcuda.so.1']")
    monkeypatch.setenv("PATH", f"{_fake_tools(tmp_path / 'empty', '1 libs found in cache')}:{os.environ['PATH']}")
    with pytest.raises(StrategyUnavailable) as caught:
        _options.check_compiler("ddp", device="cuda")
    assert str(caught.value) == (
        "ddp option compile=True on CUDA needs a libcuda.so.1 Triton can find (TRITON_LIBCUDA_PATH, ldconfig's "
        "cache or LD_LIBRARY_PATH), but none of them lists one"
    )


def test_libcuda_so_1_is_found_where_triton_looks(monkeypatch, tmp_path, driver_only):
    monkeypatch.setenv("PATH", f"{_fake_tools(tmp_path / 'empty', '1 libs found in cache')}:{os.environ['PATH']}")
    assert _options.libcuda_link({}).triton_dirs == ()
    assert _options.libcuda_link({"TRITON_LIBCUDA_PATH": str(driver_only)}).triton_dirs == (str(driver_only),)
    assert _options.libcuda_link({"LD_LIBRARY_PATH": f"/nowhere:{driver_only}"}).triton_dirs == (str(driver_only),)
    # TRITON_LIBCUDA_PATH is where Triton links from, and it asserts the driver is there.
    assert _options.libcuda_link({"TRITON_LIBCUDA_PATH": str(tmp_path)}).triton_dirs == ()


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
