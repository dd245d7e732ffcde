"""The GPU workflows (parsed as YAML): the benchmarks job runs the suites on CUDA and fails without
it, no workflow runs a fork's code by default, and both GPU jobs queue on one group per host and
restore the lock's .venv."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _workflow(name: str = "gpu-benchmarks.yml") -> dict:
    yaml = pytest.importorskip("yaml", reason="PyYAML (the test extra) parses the workflow")
    return yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text())


GPU_JOBS = (("gpu-benchmarks.yml", "benchmarks"), ("upgrade-check.yml", "upgrade-check"))
FORK_GUARD = "github.event.pull_request.head.repo.full_name == github.repository"


def test_workflow_runs_the_suites_on_cuda_and_fails_without_it():
    workflow = _workflow()
    assert workflow["env"]["DPBENCH_DEVICE"] == "cuda"
    steps = workflow["jobs"]["benchmarks"]["steps"]
    runs = [str(s.get("run", "")) for s in steps]
    assert "nvidia-smi" in runs[0]  # the inventory before anything else
    check = next(i for i, r in enumerate(runs) if "-m tools.gpu_inventory --require-cuda" in r)
    assert "|| true" not in runs[check] and not steps[check].get("continue-on-error")
    measuring = [i for i, r in enumerate(runs) if "dpbench ab" in r or "pytest suites/" in r]
    assert measuring and check < min(measuring)
    assert not any("DPBENCH_DEVICE" in str(s.get("env", {})) for s in steps)  # no step turns it off


def test_no_gpu_workflow_runs_a_forks_code_by_default():
    benchmarks = _workflow()
    # PyYAML reads the key `on` as True.
    assert "pull_request" in benchmarks[True] and "pull_request_target" not in benchmarks[True]
    guard = benchmarks["jobs"]["benchmarks"]["if"]
    assert guard == f"github.event_name != 'pull_request' || {FORK_GUARD}"
    upgrade = _workflow("upgrade-check.yml")
    assert set(upgrade[True]) == {"workflow_dispatch"}  # started by hand by someone with write access


def test_both_gpu_workflows_queue_on_one_group_per_host_and_restore_the_venv():
    groups = set()
    for name, job_name in GPU_JOBS:
        job = _workflow(name)["jobs"][job_name]
        concurrency = job["concurrency"]
        assert concurrency["cancel-in-progress"] is False, name  # never cancel another workflow's measurement
        groups.add(concurrency["group"])
        steps = job["steps"]
        cache = next(i for i, s in enumerate(steps) if str(s.get("uses", "")).startswith("actions/cache@"))
        setup = next(i for i, s in enumerate(steps) if "scripts/setup-env" in str(s.get("run", "")))
        checkout = next(i for i, s in enumerate(steps) if str(s.get("uses", "")).startswith("actions/checkout@"))
        assert checkout < cache < setup, name  # checkout cleans .venv; the cache brings it back before setup
        assert steps[cache]["with"]["path"] == ".venv"
        assert "hashFiles('constraints.txt', 'pyproject.toml')" in steps[cache]["with"]["key"]
    assert len(groups) == 1 and "vars.DPBENCH_GPU_HOST" in groups.pop()
