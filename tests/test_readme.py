"""The README's Python examples run as written, and its quick-start commands exist."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
EXAMPLES = dict(re.findall(r"<!-- readme-example: ([\w-]+) -->\n```python\n(.*?)```", README, flags=re.S))


def test_examples_are_found():
    assert set(EXAMPLES) == {"launch", "custom-workload"}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_runs(name, tmp_path):
    script = tmp_path / f"{name.replace('-', '_')}.py"
    script.write_text(EXAMPLES[name])
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "samples/s" in proc.stdout or float(proc.stdout.strip().splitlines()[-1]) > 0


def test_quick_start_commands_exist():
    for command in re.findall(r"^(scripts/\S+)", README, flags=re.M):
        path = ROOT / command
        assert path.is_file() and os.access(path, os.X_OK), command
