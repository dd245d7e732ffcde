"""The suites run end to end as a user runs them: saved JSON with the documented extra_info,
raw timings, published timelines, readable by pytest-benchmark, and no process left behind —
also when a strategy fails and when the run is interrupted with Ctrl-C."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import psutil
import pytest

from dpbench.schema import EXTRA_INFO_FIELDS, SCHEMA_VERSION

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _env(marker: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"DPBENCH_PROFILE": "quick", "DPBENCH_WORKLOADS": "mlp", "DPBENCH_WORLD_SIZES": "1,2",
                "DPBENCH_SMOKE_MARKER": marker, "PYTHONUNBUFFERED": "1"})
    env.update(extra)
    return env


def _leftovers(marker: str, grace: float = 0.0) -> list[psutil.Process]:
    """Processes still alive that inherited this test's marker (workers of the pytest run).

    With ``grace``, wait up to that long for them to go: multiprocessing's forkserver and
    resource tracker exit when they see their parent's pipe close, a moment after it exits.
    """
    deadline = time.monotonic() + grace
    while True:
        found = _alive(marker)
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(0.2)


def _alive(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("DPBENCH_SMOKE_MARKER") == marker:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def _pytest(args: list[str], env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_suites_save_the_documented_run(tmp_path):
    marker = uuid.uuid4().hex
    storage = tmp_path / "results"
    selection = ("test_throughput and (single or ddp) or test_allreduce_vs_ddp and not mode"
                 " or test_collective and all_reduce and 4KiB and not 64KiB and not bucket")
    proc = _pytest(["suites/", "-k", selection, f"--benchmark-storage=file://{storage}",
                    "--benchmark-save=smoke", "-q"], _env(marker))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    saved = list(storage.glob("*/0001_smoke.json"))
    assert len(saved) == 1, list(storage.rglob("*"))
    run = json.loads(saved[0].read_text())
    assert run["machine_info"]["dpbench"]["lock_hash"]
    assert run["machine_info"]["torch"]
    by_kind: dict[str, list] = {}
    for bench in run["benchmarks"]:
        by_kind.setdefault(bench["extra_info"]["kind"], []).append(bench)
        assert bench["stats"]["data"], f"{bench['name']} has no raw per-round timings"
    assert {b["extra_info"]["strategy"] for b in by_kind["training"]} == {"single", "ddp"}
    for bench in by_kind["training"]:
        info = bench["extra_info"]
        assert set(EXTRA_INFO_FIELDS) <= set(info), set(EXTRA_INFO_FIELDS) - set(info)
        assert info["schema"] == SCHEMA_VERSION and info["workload"] == "mlp"
        assert info["samples_per_s"] > 0 and info["step_time_p95"] >= info["step_time_p50"] > 0
        # Per-step time from pytest-benchmark's round median agrees with the worker-measured median.
        per_step = bench["stats"]["median"] / info["steps_per_round"]
        assert 0.5 < per_step / info["step_time_p50"] < 2.0
        timeline = saved[0].parent / info["sampler"]["timeline"]
        assert timeline.is_file() and timeline.stat().st_size > 0
        assert info["sampler"]["sample_count"] > 0
    # ddp-mlp-w2 ran in two suites: each keeps its own timeline.
    timelines = [b["extra_info"]["sampler"]["timeline"] for b in by_kind["training"]]
    assert len(by_kind["training"]) == 4 and len(set(timelines)) == len(timelines), timelines
    (comm,) = by_kind["collective"]
    assert comm["extra_info"]["busbw_gbps"] > 0 and comm["extra_info"]["size_bytes"] == 4096
    # pytest-benchmark's own tooling reads what we saved.
    listed = subprocess.run([sys.executable, "-m", "pytest_benchmark", "--storage", f"file://{storage}",
                             "compare", "0001", "--columns=min,median"], capture_output=True, text=True, cwd=ROOT)
    assert listed.returncode == 0, listed.stderr
    assert "test_throughput[ddp-mlp-w2]" in listed.stdout
    # ... and so does our report, timelines included.
    html = tmp_path / "report.html"
    made = subprocess.run([sys.executable, "-m", "dpbench.cli", "report", str(saved[0]), "-o", str(html)],
                          capture_output=True, text=True, cwd=ROOT)
    assert made.returncode == 0, made.stderr
    page = html.read_text()
    assert "ddp w2" in page and "single w1" in page
    assert page.count("<img") >= 5
    assert "No sampler timelines" not in page and "could not be read" not in page and "holds no samples" not in page
    assert not _leftovers(marker, grace=10)


def test_a_failing_strategy_fails_only_its_case(tmp_path):
    marker = uuid.uuid4().hex
    suite = tmp_path / "suite_fault"
    suite.mkdir()
    (suite / "conftest.py").write_text((ROOT / "suites" / "conftest.py").read_text())
    (suite / "test_fault.py").write_text(textwrap.dedent('''
        import torch
        from torch import nn
        import dpbench
        from dpbench.suite import TrainingCase, measure_training

        class Exploding(nn.Linear):
            def forward(self, x):
                raise RuntimeError("exploding forward on purpose")

        def exploding_model():
            return Exploding(784, 10)

        BOOM = dpbench.Workload(name="boom", model=exploding_model, batch=dpbench.get_workload("mlp").batch)

        def test_boom(benchmark, profile):
            measure_training(benchmark, TrainingCase(strategy="ddp", workload=BOOM, world_size=2, global_batch=8),
                             profile=profile, suite="fault")

        def test_after(benchmark, profile):
            info, _ = measure_training(benchmark, TrainingCase(strategy="single", workload="mlp", world_size=1,
                                       global_batch=8), profile=profile, suite="fault")
            assert info["samples_per_s"] > 0
    '''))
    proc = _pytest([str(suite), "-q", f"--benchmark-storage=file://{tmp_path / 'results'}"], _env(marker))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-4000:]
    assert "1 failed, 1 passed" in out, out[-4000:]
    assert "exploding forward on purpose" in out  # the worker's traceback reaches the report
    assert not _leftovers(marker, grace=10)


def test_ctrl_c_keeps_earlier_runs_and_leaves_no_partial_file(tmp_path):
    marker = uuid.uuid4().hex
    storage = tmp_path / "results"
    earlier = storage / "Some-Machine" / "0001_earlier.json"
    earlier.parent.mkdir(parents=True)
    earlier.write_text(json.dumps({"benchmarks": [], "machine_info": {}, "version": "x"}))
    before = earlier.read_bytes()
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "suites/", "-q",
                             "-k", "test_throughput", f"--benchmark-storage=file://{storage}",
                             "--benchmark-save=interrupted"], cwd=ROOT, env=_env(marker),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        # Interrupt once the workers are up, i.e. in the middle of a case.
        while time.monotonic() < deadline and len(_alive(marker)) < 4:
            time.sleep(0.2)
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0, out[-3000:]
    assert earlier.read_bytes() == before
    for path in storage.rglob("*"):
        assert ".partial" not in path.name, path
        if path.suffix == ".json":
            json.loads(path.read_text())  # every saved file is complete
    assert not _leftovers(marker, grace=10)


def test_suites_run_once_each_with_benchmark_disable(tmp_path):
    """`--benchmark-disable` (a quick "does every case work" pass) runs each target once."""
    marker = uuid.uuid4().hex
    selection = "test_throughput and dp and w2 or test_dp_phases or test_collective and 4KiB and not 64KiB"
    proc = _pytest(["suites/", "-q", "--benchmark-disable", "-k", selection,
                    f"--benchmark-storage=file://{tmp_path / 'results'}"], _env(marker))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "failed" not in proc.stdout
    assert not _leftovers(marker, grace=10)
