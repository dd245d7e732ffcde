"""The Python parts of the GPU check, on CPU: the smoke's cases and its failure text (the worker's
traceback, not one line), the inventory's lines (persistence and compute mode, the lock or the
image's packages), the traces verdict, the GradScaler bench; and scripts/setup-env without a
reachable package index (one line, no .venv left behind)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script(module: str):
    return importlib.import_module(module)


# -- python -m tools.gpu_smoke ------------------------------------------------------------------------
@pytest.mark.slow  # imports every strategy (torch.distributed's FSDP and ZeRO): ~8 s on a busy machine
def test_smoke_cases_are_what_one_gpu_can_run(monkeypatch):
    import torch

    from dpbench.strategies import get_strategy
    from dpbench.workloads import get_workload

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    smoke = _script("tools.gpu_smoke")
    strategies = {s for s, _w, _o, _l in smoke.CASES}
    assert strategies == {"single", "dp", "manual", "ddp", "allreduce", "zero", "fsdp", "torch-dp"}
    bf16 = {(s, w) for s, w, o, _l in smoke.CASES if o.get("precision") == "bf16"}
    assert bf16 == {("single", 1), ("ddp", 2), ("fsdp", 1)}
    assert {"lenet", "resnet18", "transformer"} <= {workload for *_, workload in smoke.CASES}
    for strategy, world_size, options, workload in smoke.CASES:
        get_workload(workload)  # registered
        cls = get_strategy(strategy)
        resolved = cls.parse_options(options, device="cuda", world_size=world_size, global_batch=16)
        placement = cls.placement(world_size=world_size, device="cuda", options=resolved)  # refused → raises
        assert set(placement.devices) == {"cuda:0"}
        if placement.processes == 2:
            assert placement.backend == "gloo"  # two ranks on one GPU


def test_the_smoke_line_names_the_case_and_a_serial_share():
    smoke = _script("tools.gpu_smoke")
    line = smoke.smoke_line(
        "dp",
        2,
        {"precision": "bf16"},
        {"backend": None, "devices": ["cuda:0", "cuda:0"]},
        0.0015,
        0.003,
        {"peak_source": "table:NVIDIA H200", "math_mode": None, "gpu_keys": ["GPU-1"], "replica_concurrency": "serial"},
        "lenet",
    )
    assert line == (
        "ok dp w2 precision=bf16 lenet: backend None devices cuda:0,cuda:0 step 1.50 ms control 3.00 ms "
        "peak table:NVIDIA H200 math None gpus 1; serial"
    )


def test_a_failing_case_keeps_every_failing_workers_traceback():
    from dpbench.workers import WorkerError

    smoke = _script("tools.gpu_smoke")
    tracebacks = {
        1: 'Traceback (most recent call last):\n  File "ddp.py", line 9, in setup\nRuntimeError: NCCL error\n',
        0: "worker rank 0 stopped: its peer died",
    }
    error = WorkerError("worker rank 1 failed (world_size=2):\n" + tracebacks[1], rank=1, failures=tracebacks)
    assert smoke.failure_text(error) == (
        "WorkerError: worker rank 1 failed (world_size=2):\n"
        "--- rank 0 ---\nworker rank 0 stopped: its peer died\n"
        "--- rank 1 ---\n" + tracebacks[1].rstrip()
    )
    try:
        raise ValueError("in the parent")
    except ValueError as exc:  # not a worker's: this process's own traceback
        text = smoke.failure_text(exc)
    assert text.startswith("ValueError: in the parent\nTraceback (most recent call last):")
    assert text.endswith("ValueError: in the parent")


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_smoke_runs_every_case_and_prints_each_failure_with_its_traceback(monkeypatch, capsys, device):
    import torch

    from dpbench.strategies import StrategyUnavailable
    from dpbench.workers import WorkerError

    smoke = _script("tools.gpu_smoke")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)

    def one(strategy, world_size, options, *, workload, device, steps):
        if strategy == "zero":
            raise WorkerError("worker rank 1 failed (world_size=2):", rank=1, failures={1: "Traceback\nOSError: x"})
        if strategy == "torch-dp":
            raise StrategyUnavailable("torch-dp needs CUDA")
        return f"ok {smoke.case_name(strategy, world_size, options, workload)}"

    monkeypatch.setattr(smoke, "_one", one)
    assert smoke.main(["--device", device, "--only", "mlp"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert re.fullmatch(
        r"FAIL zero w2 mlp \(\d+\.\d s\): WorkerError: worker rank 1 failed \(world_size=2\):", lines[6]
    )
    assert lines[7:10] == ["--- rank 1 ---", "Traceback", "OSError: x"]
    refused = {"cpu": "skip torch-dp w1 mlp: torch-dp needs CUDA", "cuda": "FAIL torch-dp w1 mlp: refused on cuda: "}
    assert lines[11].startswith(refused[device])
    assert len([line for line in lines if line.startswith("ok ")]) == 11  # every other mlp case ran
    assert lines[-1] == f"gpu-smoke: {2 if device == 'cuda' else 1} of the cases failed"


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_the_smoke_holds_nvml_open_across_every_case_on_cuda(monkeypatch, capsys, device):
    import torch

    smoke = _script("tools.gpu_smoke")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    calls = []
    fake = SimpleNamespace(nvmlInit=lambda: calls.append("init"), nvmlShutdown=lambda: calls.append("shutdown"))
    monkeypatch.setitem(sys.modules, "pynvml", fake)

    def one(strategy, world_size, options, *, workload, device, steps):
        calls.append("case")
        return "ok"

    monkeypatch.setattr(smoke, "_one", one)
    assert smoke.main(["--device", device, "--only", "w1 mlp"]) == 0
    cases = ["case"] * len([c for c in smoke.CASES if "w1 mlp" in smoke.case_name(*c)])
    # Once around all the cases, not per case: each case's workers find the GPU initialised.
    assert calls == (["init", *cases, "shutdown"] if device == "cuda" else cases)


def test_the_compile_test_skips_with_the_strategys_refusal(monkeypatch):
    from dpbench.strategies import _options

    monkeypatch.syspath_prepend(str(ROOT / "tests" / "strategies"))
    spec = importlib.util.spec_from_file_location(
        "sharded_cuda", ROOT / "tests" / "strategies" / "test_sharded_cuda.py"
    )
    sharded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sharded)
    # A C compiler on PATH, but no Python.h: check_compiler refuses, so the test must skip, not fail.
    monkeypatch.setattr(_options.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(_options, "python_header", lambda: Path("/nowhere/include/Python.h"))
    with pytest.raises(pytest.skip.Exception, match="Python.h.*python3-dev"):
        sharded.test_compile_on_cuda_matches_eager_single(single_runs=None)


def test_nvml_refusing_a_metric_inside_a_vm_is_recorded_not_failed():
    spec = importlib.util.spec_from_file_location("nvml_real", ROOT / "tests" / "sampler" / "test_nvml_real.py")
    nvml_real = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(nvml_real)
    refused = "cuda:0 energy: NVMLError_NoPermission: Insufficient Permissions"
    broken = "cuda:0 utilization: NVMLError_GpuIsLost: GPU is lost"
    with pytest.warns(UserWarning, match="NVML refused or lacks 1 metric"):
        assert nvml_real.unexpected_nvml_errors([refused, broken]) == [broken]


def test_convergence_on_cuda_holds_a_perturbed_run_to_what_the_seed_spread_guarantees():
    import math

    spec = importlib.util.spec_from_file_location("convergence_suite", ROOT / "suites" / "test_convergence.py")
    suite = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(suite)
    from dpbench.workloads.recipes import DIGITS_MLP_SEED_FINALS, get_recipe

    recipe = get_recipe("digits-mlp")
    floor, tolerance = recipe.expected_accuracy, recipe.parity_tolerance
    assert suite.asserted_bounds(floor, tolerance, reproducible=True) == (floor, tolerance)
    on_cuda_floor, on_cuda_tolerance = suite.asserted_bounds(floor, tolerance, reproducible=False)
    # Every seed's final accuracy, perturbed by a tolerance either way, still passes on CUDA...
    assert all(final - tolerance >= on_cuda_floor for final in DIGITS_MLP_SEED_FINALS)
    spread = max(DIGITS_MLP_SEED_FINALS) - min(DIGITS_MLP_SEED_FINALS)
    assert on_cuda_tolerance == pytest.approx(tolerance * math.sqrt(2)) and on_cuda_tolerance >= spread
    # ...while the recipe's own floor and tolerance would fail such runs.
    assert min(DIGITS_MLP_SEED_FINALS) - tolerance < floor and spread > tolerance
    assert suite.asserted_bounds(None, None, reproducible=False) == (None, None)


# -- python -m tools.gpu_inventory --------------------------------------------------------------------
def test_inventory_names_why_cuda_is_unusable():
    inventory = _script("tools.gpu_inventory")
    cpu_build = {"torch": "2.13.0+cpu", "cuda": None, "gpu_count": 0}
    assert "CPU-only build" in inventory.cuda_problem(cpu_build, cuda_available=False)
    old_driver = {"torch": "2.13.0", "cuda": "12.8", "gpu_count": 2, "driver": "470.57"}
    assert "driver too old" in inventory.cuda_problem(old_driver, cuda_available=False)
    assert inventory.cuda_problem(old_driver, cuda_available=True) is None
    lines = inventory.inventory_lines(
        {**old_driver, "nccl": "2.27.3", "gpus": [{"name": "NVIDIA H200", "uuid": "GPU-1", "memory_bytes": 141 << 30}]},
        cuda_available=True,
        cuda_devices=2,
        cudnn=91000,
    )
    assert lines[0] == "driver: 470.57" and "nccl: 2.27.3" in lines[1] and "NVIDIA H200" in lines[-1]


def test_inventory_reads_persistence_and_compute_mode():
    inventory = _script("tools.gpu_inventory")

    class Nvml:  # two GPUs: persistence off / compute DEFAULT, persistence on / EXCLUSIVE_PROCESS
        def nvmlDeviceGetCount(self):
            return 2

        def nvmlDeviceGetHandleByIndex(self, i):
            return SimpleNamespace(i=i)

        def nvmlDeviceGetPersistenceMode(self, h):
            return h.i

        def nvmlDeviceGetComputeMode(self, h):
            if h.i == 1:
                return 3
            raise RuntimeError("Not Supported")

    modes = inventory.gpu_modes(Nvml())
    assert modes == [
        {"index": 0, "persistence": 0, "compute": "unknown (Not Supported)"},
        {"index": 1, "persistence": 1, "compute": 3},
    ]
    lines = inventory.mode_lines([{"index": 0, "persistence": 0, "compute": 0}, modes[1]])
    assert lines[0] == "  gpu 0: persistence mode off (dpbench holds NVML open during a session)  compute mode DEFAULT"
    assert lines[1] == (
        "  gpu 1: persistence mode on  compute mode EXCLUSIVE_PROCESS  WARNING: two ranks on this GPU need compute "
        "mode DEFAULT"
    )


def test_inventory_says_whether_the_packages_are_the_lock():
    inventory = _script("tools.gpu_inventory")
    assert inventory.provenance_line("/v/python", {"lock_hash": "0123456789abcdef"}) == (
        "python: /v/python  packages: the lock (constraints.txt, hash 0123456789ab)"
    )
    line = inventory.provenance_line("/usr/bin/python3", {"lock_hash": None, "lock_drift": {"torch": "2.9.1+cu128"}})
    assert (
        line
        == "python: /usr/bin/python3  packages: NOT the lock; saved runs record the versions found: torch 2.9.1+cu128"
    )


def test_inventory_names_the_modules_an_images_python_lacks():
    inventory = _script("tools.gpu_inventory")
    assert inventory.missing_line(lambda name: object()) == "missing for gpu-check: nothing"
    lacking = {"pytest_benchmark", "sklearn"}
    assert inventory.missing_line(lambda name: None if name in lacking else object()) == (
        "missing for gpu-check: pytest_benchmark (every pytest step (pyproject's addopts name its options)); "
        "sklearn (the convergence step (scikit-learn's digits))"
    )


@pytest.mark.slow  # a fresh interpreter importing torch
def test_inventory_fails_here_when_cuda_is_required():
    out = subprocess.run(
        [sys.executable, "-m", "tools.gpu_inventory", "--require-cuda"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1 and "CUDA required but unavailable" in out.stderr
    assert out.stdout.startswith("python: ") and "\nmissing for gpu-check: nothing\ndriver: " in out.stdout


# -- python -m tools.gpu_check_verify -----------------------------------------------------------------
def _traced(comm: list[float], *, skew: bool = True) -> dict:
    ranks = [{"rank": r, "comm_s": c} for r, c in enumerate(comm)]
    breakdown = {"ranks": ranks, "problems": [], "comm_transport": "host", "skew": None}
    if skew:
        breakdown["skew"] = {"collectives": 3, "median_skew_s": 0.0002}
    return {"name": "test_throughput[ddp-mlp-w2]", "extra_info": {"world_size": 2, "trace_breakdown": breakdown}}


def test_a_traced_case_without_communication_fails_the_traces_step():
    verify = _script("tools.gpu_check_verify")
    line, problems = verify.traced_case_problems(_traced([0.001, 0.0012]))
    assert problems == [] and line == (
        "test_throughput[ddp-mlp-w2]: communication 1, 1.2 ms/step per rank (host transport), 3 collectives "
        "matched, median skew 0.2 ms"
    )
    assert verify.traced_case_problems(_traced([0.0, 0.001], skew=False))[1] == [
        "no communication in the trace of rank(s) [0]",
        "no collective matched across the ranks: no arrival skew",
    ]
    assert verify.traced_case_problems({"extra_info": {"world_size": 1, "trace_breakdown": {}}}) is None


def test_the_traces_step_passes_a_run_whose_traced_cases_communicate_and_fails_one_that_does_not(tmp_path, capsys):
    verify = importlib.import_module("tools.gpu_check_verify")
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    untraced = {"name": "test_collective[4KiB-all_reduce]", "extra_info": {"world_size": 2}}
    good.write_text(json.dumps({"benchmarks": [_traced([0.001, 0.0012]), untraced]}))
    bad.write_text(json.dumps({"benchmarks": [_traced([0.0, 0.001])]}))
    assert verify.main(["traces", str(good)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "ok test_throughput[ddp-mlp-w2]: communication 1, 1.2 ms/step per rank (host transport), 3 collectives "
        "matched, median skew 0.2 ms",
        "traces: 1 of 1 traced case(s) show communication on every rank",
    ]
    assert verify.main(["traces", str(good), str(bad)]) == 1
    out = capsys.readouterr().out
    assert "    no communication in the trace of rank(s) [0]" in out
    assert out.endswith("traces: 1 of 2 traced case(s) show communication on every rank\n")
    good.write_text(json.dumps({"benchmarks": [untraced]}))
    assert verify.main(["traces", str(good)]) == 1  # nothing traced: nothing was checked
    assert capsys.readouterr().out.startswith("no traced case with two or more ranks in ")


# -- python -m benchmarks.gradscaler_sync ------------------------------------------------------------
@pytest.mark.slow  # first autocast + optimizer step in the process: ~7 s on a busy machine
def test_gradscaler_bench_steps_with_and_without_the_found_inf_read():
    import torch

    bench = _script("benchmarks.gradscaler_sync")
    calls = []

    class Scaler:  # records what the step asks of the scaler
        def scale(self, loss):
            calls.append("scale")
            return loss

        def step(self, optimizer):
            calls.append("step")

        def unscale_(self, optimizer):
            calls.append("unscale_")

        def update(self):
            calls.append("update")

    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(4, 3), torch.randint(0, 2, (4,))
    blocked = []
    for host_sync in (True, False):
        bench.make_step(
            model,
            optimizer,
            Scaler(),
            torch.nn.functional.cross_entropy,
            x,
            y,
            device_type="cpu",
            host_sync=host_sync,
            blocked=blocked,
        )()
    assert calls == ["scale", "step", "update", "scale", "unscale_", "update"] and len(blocked) == 1


# -- scripts/setup-env without a package index ---------------------------------------------------
def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: nothing listens there


@pytest.mark.slow  # a venv and pip against a closed port
def test_setup_env_without_an_index_fails_with_one_line_and_leaves_no_venv(tmp_path):
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "setup-env", repo / "scripts" / "setup-env")
    for name in ("pyproject.toml", "constraints.txt", "setup.py"):
        shutil.copy(ROOT / name, repo / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k != "VIRTUAL_ENV"}
    # No index, no local wheels, no pip.conf: what a GPU machine without network sees.
    # PIP_RETRIES=0: pip's five retries with back-off change nothing here but the wait.
    env.update(
        PIP_CONFIG_FILE=os.devnull,
        PIP_INDEX_URL=f"http://127.0.0.1:{_closed_port()}/simple",
        PIP_RETRIES="0",
        TMPDIR=str(tmp_path),
    )
    env["PYTHON"] = shutil.which("python3") or sys.executable
    out = subprocess.run(
        ["bash", str(repo / "scripts" / "setup-env")], capture_output=True, text=True, env=env, timeout=600
    )
    assert out.returncode == 1 and out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("setup-env: pip could not install the lock (ERROR: ")
    assert "the .venv it was making is removed" in lines[0]
    assert not (repo / ".venv").exists()
    log = Path(lines[0].rsplit("pip's log: ", 1)[1].rstrip(")"))
    assert log.is_file() and "ERROR:" in log.read_text()
