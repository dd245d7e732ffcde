"""Every suite takes workload specs: ``--dpbench-workload SPEC`` (repeatable) and ``DPBENCH_WORKLOADS``,
with the per-workload global batch a spec sets; a bad spec stops the session in one line."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from _suites_helpers import ROOT
from _user_models import SOURCE

from dpbench.measure import resolve_profile

pytestmark = pytest.mark.slow  # each test starts a pytest that imports torch


def _collect(tmp_path, *args, env_workloads=None):
    (tmp_path / "my_models.py").write_text(SOURCE)
    env = {
        "PATH": "/usr/bin:/bin",
        "DPBENCH_PROFILE": "quick",
        "DPBENCH_WORLD_SIZES": "1,2",
        "PYTHONPATH": f"{ROOT}:{tmp_path}",
    }
    if env_workloads:
        env["DPBENCH_WORKLOADS"] = env_workloads
    return subprocess.run(
        [sys.executable, "-m", "pytest", str(ROOT / "suites"), "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_the_option_replaces_the_profile_workloads_in_every_suite_with_their_batches(tmp_path):
    proc = _collect(
        tmp_path, "--dpbench-workload", "my_models:tiny_net@hidden=4,global_batch=6", "--dpbench-workload", "mlp"
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    ids = re.findall(r"\[(.*?)\]$", proc.stdout, flags=re.M)
    spec = "my_models:tiny_net@hidden=4,global_batch=6"
    for suite in ("test_throughput", "test_scaling", "test_sharding", "test_dp_phases"):
        assert any(suite in line and spec in line for line in proc.stdout.splitlines()), suite
    assert f"ddp-{spec}-w2" in ids and "ddp-mlp-w2" in ids
    assert not any("lenet" in i or "transformer" in i for i in ids)  # the profile's workloads are replaced


def test_a_bad_spec_stops_the_session_in_one_line_before_anything_runs(tmp_path):
    proc = _collect(tmp_path, "--dpbench-workload", "my_models:tiny_nett")
    assert proc.returncode == 4  # pytest's usage error
    assert (
        "ERROR: --dpbench-workload: workload spec 'my_models:tiny_nett': module 'my_models' has no attribute "
        "'tiny_nett'; its Workload attributes: fixed, tiny_net"
    ) in proc.stderr
    assert "Traceback" not in proc.stderr


def test_dpbench_workloads_takes_specs_with_overrides_and_batches(tmp_path, monkeypatch):
    (tmp_path / "my_models.py").write_text(SOURCE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    raw = "my_models:tiny_net@hidden=4,global_batch=12,mlp@hidden=8"
    profile = resolve_profile(cuda_count=0, cpu_count=2, environ={"DPBENCH_WORKLOADS": raw})
    assert profile.workloads == ("my_models:tiny_net@hidden=4,global_batch=12", "mlp@hidden=8")
    assert profile.global_batch_for(profile.workloads[0]) == 12
    assert profile.per_replica_batch_for(profile.workloads[0]) == 6  # the quick profile's 64 : 32
    assert profile.global_batch_for("mlp@hidden=8") == profile.global_batch == 64
    both = profile.with_workloads(profile.workloads)
    assert both.scaling_workloads == profile.workloads and both.knob_workload == profile.workloads[0]
    sys.modules.pop("my_models", None)
