"""The README's quick-start commands exist (its Python examples run in tests/test_readme_examples.py)."""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_quick_start_commands_exist():
    commands = re.findall(r"^(scripts/\S+)", README, flags=re.M)
    assert {"scripts/bench", "scripts/test"} <= set(commands)
    for command in commands:
        path = ROOT / command
        assert path.is_file() and os.access(path, os.X_OK), command
