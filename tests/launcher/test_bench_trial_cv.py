"""python -m benchmarks.trial_cv: bad input, and a tiny real run that switches pinning through DPBENCH_PIN."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "DPBENCH_PIN"}
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.trial_cv", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--trials", "1"], "--trials must be an int >= 2"),
        (["--trials", "two"], "invalid int value"),
        (["--cases", "ddp-mlp-w9"], "unknown case(s) ddp-mlp-w9; known: single-mlp-w1"),
        (["--target-s", "0"], "--target-s must be a positive number"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(args, message):
    out = _run(*args, timeout=60)
    assert out.returncode == 2 and message in out.stderr


@pytest.mark.slow
@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs Linux pinning and 2 usable cores",
)
def test_two_trials_of_ddp_alternate_pinned_and_unpinned_workers(tmp_path):
    out = _run("--trials", "2", "--cases", "ddp-mlp-w2", "--target-s", "0.01", "--json", str(tmp_path / "cv.json"))
    assert out.returncode == 0, out.stderr
    result = json.loads((tmp_path / "cv.json").read_text())
    (case,) = result["cases"]
    assert case["case"] == "ddp-mlp-w2" and len(case["trials_on"]) == len(case["trials_off"]) == 2
    cores = len(os.sched_getaffinity(0))
    on_sets = [s.split(" ") for s in case["cores_on"]]
    assert all(len(ranks) == 2 and len(set(ranks)) == 2 for ranks in on_sets)  # each rank its own cores
    everything = ",".join(map(str, sorted(os.sched_getaffinity(0))))
    assert case["cores_off"] == [f"{everything} {everything}"] and cores >= 2
    assert set(result["summary"]) == {"on", "off"}
    assert "pinning on : CV over 1 cases: median" in out.stdout
