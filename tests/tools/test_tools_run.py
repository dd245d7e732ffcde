"""The programs of ``tools/`` run end to end at their smallest size, each asserting its exit code and
what it printed or wrote.

Run here elsewhere: ``gen_docs`` (tests/docs/test_docs_generated.py), ``gpu_check_verify``,
``gpu_inventory`` and ``gpu_smoke`` (tests/test_gpu_tools.py),
``soak_faults`` (tests/faults/test_soak_faults.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # a fresh interpreter importing transformers, one model built on the meta device
def test_check_hf_types_resolves_and_steps_one_type(tmp_path):
    # In a fresh process: the program silences warnings and logging and takes SIGALRM for itself.
    out_file = tmp_path / "hf.json"
    out = subprocess.run(
        [sys.executable, "-m", "tools.check_hf_types", "--types", "gpt2", "--timeout", "120", "--json", str(out_file)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out_file.read_text()) == {
        "gpt2": {"class": "GPT2LMHeadModel", "task": "causal-lm", "resolve": "ok", "step": "ok"}
    }
    assert out.stdout.splitlines()[1:] == [
        "causal-lm: 1 types, 1 resolve, 1 step on fake tensors",
        "all: 1 types, 1 resolve, 1 step on fake tensors",
    ]
