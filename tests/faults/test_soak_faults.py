"""The fault soak's short version (python -m tools.soak_faults): two runs of the small suite, each
with one fault at a random moment, and not one violation (no process or directory left, no
partial or half-measured run, earlier runs unchanged, every outcome explained)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_a_short_soak_has_no_violation(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tools.soak_faults",
            "--runs",
            "2",
            "--seed",
            "7",
            "--kinds",
            "sigkill,kill-worker",
            "--trials",
            "1",
            "--window",
            "4,12",
            "--no-baseline",
            "--dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "| fault | runs | outcomes |" in out and "processes left 5 s after the run: 0" in out, out
    assert "unexplained outcomes: 0" in out and "hangs: 0" in out, out
