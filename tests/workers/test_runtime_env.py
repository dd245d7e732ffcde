"""The workers' OpenMP runtime runs with the user's environment: dpbench adds no wait policy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from dpbench.workers.runtime_env import patched_environ, runtime_env_patch, user_runtime_env

# A fresh process: the forkserver helper (and so libgomp's one reading of the environment)
# starts with its first WorkerPool. OMP_DISPLAY_ENV makes libgomp print what it read.
_PROBE = textwrap.dedent("""
    import json, os
    from dpbench.launcher import WorkerPool
    if __name__ == "__main__":
        with WorkerPool(1, process_group=False) as pool:
            facts = pool.worker_facts[0]
        print(json.dumps({"runtime_env": facts["runtime_env"], "env": facts["env"],
                          "parent_after": os.environ.get("OMP_WAIT_POLICY")}))
""")


def _probe(**env: str) -> tuple[dict, str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")}
    environ.update(env, OMP_DISPLAY_ENV="VERBOSE")
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120, env=environ)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def _libgomp_spincount(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if "GOMP_SPINCOUNT =" in line]
    if not lines:
        pytest.skip("torch's OpenMP runtime here is not libgomp (no OMP_DISPLAY_ENV output)")
    return lines[0].split("=", 1)[1].strip().strip("'")


def test_no_runtime_variable_is_added_and_the_users_are_recorded():
    assert runtime_env_patch({}) == {}
    for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME"):
        assert runtime_env_patch({name: "1"}) == {}
    assert user_runtime_env(
        {
            "OMP_WAIT_POLICY": "ACTIVE",
            "MKL_X": "1",
            "PATH": "/bin",
            "MALLOC_TRIM_THRESHOLD_": "9",
            "GLIBC_TUNABLES": "glibc.malloc.trim_threshold=9",
            "MALLOCX": "no",
        }
    ) == {
        "GLIBC_TUNABLES": "glibc.malloc.trim_threshold=9",
        "MALLOC_TRIM_THRESHOLD_": "9",
        "MKL_X": "1",
        "OMP_WAIT_POLICY": "ACTIVE",
    }


def test_patched_environ_adds_for_the_duration_and_never_overrides(monkeypatch):
    monkeypatch.delenv("DPBENCH_TEST_A", raising=False)
    monkeypatch.setenv("DPBENCH_TEST_B", "mine")
    with patched_environ({"DPBENCH_TEST_A": "x", "DPBENCH_TEST_B": "theirs"}):
        assert os.environ["DPBENCH_TEST_A"] == "x" and os.environ["DPBENCH_TEST_B"] == "mine"
    assert "DPBENCH_TEST_A" not in os.environ and os.environ["DPBENCH_TEST_B"] == "mine"


@pytest.mark.slow
def test_forkserver_runtime_keeps_the_runtimes_default_and_the_parent_is_left_clean():
    result, stderr = _probe()
    assert "OMP_WAIT_POLICY" not in result["runtime_env"] and "OMP_WAIT_POLICY" not in result["env"]
    assert result["parent_after"] is None
    assert _libgomp_spincount(stderr) != "0"  # libgomp's own default (it spins); PASSIVE would print 0


@pytest.mark.slow
def test_a_user_passive_setting_reaches_the_runtime():
    result, stderr = _probe(OMP_WAIT_POLICY="PASSIVE")
    assert result["runtime_env"]["OMP_WAIT_POLICY"] == "PASSIVE"
    assert _libgomp_spincount(stderr) == "0"


@pytest.mark.slow
def test_a_user_spin_setting_is_kept():
    result, stderr = _probe(GOMP_SPINCOUNT="1000")
    assert "OMP_WAIT_POLICY" not in result["runtime_env"] and result["runtime_env"]["GOMP_SPINCOUNT"] == "1000"
    assert _libgomp_spincount(stderr) == "1000"
