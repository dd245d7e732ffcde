"""Every ```python block of README.md and of the documentation (docs/) runs as written, on the CPU,
in a fresh interpreter.

Each block is its own script (examples guard their launches with ``if __name__ == "__main__":``
as users must) and must exit 0. None needs a GPU: the pages keep their examples CPU-sized.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = {"README.md": (ROOT / "README.md").read_text()} | {
    f"docs/{path.relative_to(ROOT / 'docs')}": path.read_text() for path in sorted((ROOT / "docs").rglob("*.md"))
}
_BLOCK = re.compile(r"^```python\n(.*?)^```", flags=re.S | re.M)
# Small sizes keep every example to seconds; the limit is for a hang, not for speed.
TIMEOUT_S = 180


def python_blocks(text: str) -> list[tuple[int, str]]:
    """``(line, source)`` of every ```python block of ``text``, in order (line: of the fence)."""
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in _BLOCK.finditer(text)]


BLOCKS = [(name, line, source) for name, text in PAGES.items() for line, source in python_blocks(text)]


def test_every_python_fence_is_extracted():
    fences = sum(len(re.findall(r"^```python\s*$", text, flags=re.M)) for text in PAGES.values())
    assert fences >= 5 and len(BLOCKS) == fences
    assert any(name == "README.md" for name, _, _ in BLOCKS)


def test_the_extractor_sees_a_broken_block(tmp_path):
    # The check below must be able to fail: a block that raises is a non-zero exit.
    [(line, source)] = python_blocks("text\n```python\nraise SystemExit('broken')\n```\nmore\n")
    assert line == 2
    assert _run(source, tmp_path).returncode != 0


def _run(source: str, cwd: Path) -> subprocess.CompletedProcess:
    script = cwd / "example.py"  # a file, so examples with `if __name__ == "__main__":` work as for a user
    script.write_text(source)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, str(script)], cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )


@pytest.mark.parametrize("name, line, source", BLOCKS, ids=[f"{name}-line-{line}" for name, line, _ in BLOCKS])
@pytest.mark.slow
def test_example_runs_as_written(name, line, source, tmp_path):
    proc = _run(source, tmp_path)
    assert proc.returncode == 0, f"{name}: the example at line {line} failed:\n{proc.stderr[-3000:]}"
