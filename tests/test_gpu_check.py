"""The GPU tooling, checked on CPU: scripts/gpu-check's step order and stop-at-first-failure (with
a stub interpreter), its Python parts (importable, their pure logic), and the GPU workflow
(parsed as YAML: DPBENCH_DEVICE=cuda, the inventory first, failing without CUDA)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STEPS = ["inventory", "gpu-tests", "smoke", "suites", "compare", "report", "gradscaler", "traces", "convergence"]


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name.replace("-", "_"), ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- scripts/gpu-check ---------------------------------------------------------------------
_STUB = textwrap.dedent("""\
    #!/usr/bin/env bash
    # Stands in for .venv/bin/python: logs its arguments, fakes saved runs, fails on request.
    echo "$*" >> "$STUB_LOG"
    for arg in "$@"; do
        case "$arg" in
            --benchmark-storage=file://*) store=${arg#--benchmark-storage=file://} ;;
            --benchmark-save=*) name=${arg#--benchmark-save=} ;;
        esac
    done
    if [ -n "${name:-}" ]; then mkdir -p "$store/machine"; echo '{}' > "$store/machine/0001_$name.json"; fi
    if [ -n "${STUB_FAIL:-}" ] && [[ "$*" == *"$STUB_FAIL"* ]]; then echo "stub: failing on purpose"; exit 3; fi
    echo "stub ok"
""")


def _checkout(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "gpu-check", repo / "scripts" / "gpu-check")
    stub = repo / ".venv" / "bin" / "python"
    stub.parent.mkdir(parents=True)
    stub.write_text(_STUB)
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    return repo


def _gpu_check(repo: Path, tmp_path: Path, **env) -> tuple[subprocess.CompletedProcess, list[str]]:
    log = tmp_path / "calls.log"
    full = {**os.environ, "STUB_LOG": str(log), **env}
    out = subprocess.run(
        ["bash", str(repo / "scripts" / "gpu-check"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=full,
        timeout=60,
    )
    return out, log.read_text().splitlines() if log.exists() else []


def test_gpu_check_parses():
    subprocess.run(["bash", "-n", str(ROOT / "scripts" / "gpu-check")], check=True)


def test_gpu_check_runs_every_step_in_order_one_line_each(tmp_path):
    out, calls = _gpu_check(_checkout(tmp_path), tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert [line.split()[1] for line in lines[:-1]] == STEPS and all(line.startswith("PASS ") for line in lines[:-1])
    assert lines[-1].startswith("gpu-check: all steps passed")
    # What each step ran: the gpu tests, the smoke, every suite on cuda, a second run, compare, report.
    assert "scripts/gpu_inventory.py --require-cuda" in calls[0]
    assert calls[1].startswith("-m pytest tests/ -m gpu")
    assert calls[2] == "scripts/gpu_smoke.py"
    assert calls[3].startswith("-m pytest suites/ ") and "--benchmark-save=gpu-check-a" in calls[3]
    assert "--benchmark-save=gpu-check-b" in calls[4]
    assert calls[5].startswith("-m dpbench.cli compare ") and calls[5].count("gpu-check-") == 2
    assert calls[6].startswith("-m dpbench.cli report ")
    assert calls[7].startswith("scripts/bench_gradscaler_sync.py")
    assert calls[8].startswith("-m pytest suites/test_throughput.py ") and "--dpbench-trace" in calls[8]
    assert calls[9].startswith("-m pytest suites/test_convergence.py ")
    assert not (tmp_path / "repo" / "results").exists()  # saved runs stay in OUTDIR


def test_gpu_check_stops_at_the_first_failure(tmp_path):
    out, calls = _gpu_check(_checkout(tmp_path), tmp_path, STUB_FAIL="gpu_smoke.py")
    assert out.returncode == 1
    lines = [line for line in out.stdout.splitlines() if not line.startswith("    ")]
    assert lines[:2] == [line for line in lines[:2] if line.startswith("PASS ")]
    assert lines[2].startswith("FAIL smoke (exit 3")
    assert "stub: failing on purpose" in out.stdout  # the log's tail is shown
    assert len(calls) == 3  # nothing after the failing step ran


def test_a_regression_verdict_is_not_a_failed_compare_step(tmp_path):
    repo = _checkout(tmp_path)
    stub = repo / ".venv" / "bin" / "python"
    stub.write_text(_STUB.replace('echo "stub ok"', '[[ "$*" == *"cli compare"* ]] && exit 1\necho "stub ok"'))
    out, _calls = _gpu_check(repo, tmp_path)
    assert out.returncode == 0 and "PASS compare" in out.stdout


# -- its Python parts ----------------------------------------------------------------------------
@pytest.mark.slow  # imports every strategy (torch.distributed's FSDP and ZeRO): ~8 s on a busy machine
def test_smoke_cases_are_what_one_gpu_can_run(monkeypatch):
    import torch

    from dpbench.strategies import get_strategy

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    smoke = _script("gpu_smoke")
    strategies = {s for s, _w, _o in smoke.CASES}
    assert strategies == {"single", "dp", "manual", "ddp", "allreduce", "zero", "fsdp", "torch-dp"}
    for strategy, world_size, options in smoke.CASES:
        cls = get_strategy(strategy)
        resolved = cls.resolve_options(dict(options), device="cuda", world_size=world_size, global_batch=16)
        placement = cls.placement(world_size=world_size, device="cuda", options=resolved)  # refused → raises
        assert set(placement.devices) == {"cuda:0"}
        if placement.processes == 2:
            assert placement.backend == "gloo"  # two ranks on one GPU
    line = smoke.smoke_line(
        "ddp",
        2,
        {"accumulation_steps": 2},
        {"backend": "gloo", "devices": ["cuda:0", "cuda:0"]},
        0.0015,
        0.003,
        {"peak_source": "table:NVIDIA H200", "math_mode": None, "gpu_keys": ["GPU-1"]},
    )
    assert line.startswith("ok ddp w2 accumulation_steps=2: backend gloo devices cuda:0,cuda:0 step 1.50 ms")


def test_inventory_names_why_cuda_is_unusable():
    inventory = _script("gpu_inventory")
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


@pytest.mark.slow  # a fresh interpreter importing torch
def test_inventory_fails_here_when_cuda_is_required():
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_inventory.py"), "--require-cuda"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1 and "CUDA required but unavailable" in out.stderr
    assert out.stdout.startswith("driver: ")


@pytest.mark.slow  # first autocast + optimizer step in the process: ~7 s on a busy machine
def test_gradscaler_bench_steps_with_and_without_the_found_inf_read():
    import torch

    bench = _script("bench_gradscaler_sync")
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


# -- the workflow --------------------------------------------------------------------------------
def _workflow() -> dict:
    yaml = pytest.importorskip("yaml", reason="PyYAML (the test extra) parses the workflow")
    return yaml.safe_load((ROOT / ".github" / "workflows" / "gpu-benchmarks.yml").read_text())


def test_workflow_runs_the_suites_on_cuda_and_fails_without_it():
    workflow = _workflow()
    assert workflow["env"]["DPBENCH_DEVICE"] == "cuda"
    steps = workflow["jobs"]["benchmarks"]["steps"]
    runs = [str(s.get("run", "")) for s in steps]
    assert "nvidia-smi" in runs[0]  # the inventory before anything else
    check = next(i for i, r in enumerate(runs) if "gpu_inventory.py --require-cuda" in r)
    assert "|| true" not in runs[check] and not steps[check].get("continue-on-error")
    measuring = [i for i, r in enumerate(runs) if "dpbench ab" in r or "pytest suites/" in r]
    assert measuring and check < min(measuring)
    assert not any("DPBENCH_DEVICE" in str(s.get("env", {})) for s in steps)  # no step turns it off
