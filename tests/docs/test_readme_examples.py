"""The README's `dpbench run` examples, run as a user runs them: each command exactly as the README
writes it (read from the README, not copied here), in a directory holding the `my_models.py` of
the Your-own-model page, from this checkout's interpreter. Each must exit 0, within the time the
README states, with a settled decision (a leader with claims, or a level set).

They measure the machine as much as dpbench (a busy machine leaves a question unsettled, as it
should), and take minutes: a validation run, DPBENCH_VALIDATION=1 (docs/validation/decision.md).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("DPBENCH_VALIDATION") != "1",
        reason="runs the README's examples for minutes on a quiet machine: DPBENCH_VALIDATION=1",
    ),
]


def readme_run_commands() -> list[str]:
    block = README.split("Your own model under every strategy", 1)[1]
    code = re.search(r"```bash\n(.*?)```", block, flags=re.S).group(1)
    return [line.strip() for line in code.splitlines() if line.strip().startswith("dpbench run ")]


def stated_seconds() -> list[float]:
    """The times the README states for its examples, in order ("about 30 s", "about 1.5 minutes")."""
    said = re.search(r"the first takes\s+about ([\d.]+) (s|minutes?), the second about ([\d.]+) (s|minutes?)", README)
    assert said, "the README states no time for its examples"
    unit = {"s": 1.0, "minute": 60.0, "minutes": 60.0}
    return [float(said[1]) * unit[said[2]], float(said[3]) * unit[said[4]]]


def my_models() -> str:
    page = (ROOT / "docs" / "your-model.md").read_text()
    return next(b for b in re.findall(r"```python\n(.*?)```", page, flags=re.S) if "def tiny_net" in b)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("index", [0, 1])
def test_a_readme_example_answers_within_its_stated_time(tmp_path, index):
    commands = readme_run_commands()
    assert len(commands) == 2
    (tmp_path / "my_models.py").write_text(my_models())
    argv = shlex.split(commands[index])[1:] + ["--json", str(tmp_path / "decision.json")]
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "dpbench.cli", *argv], cwd=tmp_path, capture_output=True, text=True, timeout=900
    )
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (question,) = json.loads((tmp_path / "decision.json").read_text())["questions"]
    assert question["outcome"] in ("fastest", "level"), proc.stdout[-3000:]
    # "about" a stated time: within twice it on a quiet machine
    assert took <= 2 * stated_seconds()[index], f"{took:.0f} s against the README's {stated_seconds()[index]:.0f} s"
