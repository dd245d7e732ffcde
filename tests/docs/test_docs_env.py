"""Every DPBENCH_* environment variable the code reads is documented, and the pages name no other.

The code's names are the string literals `DPBENCH_<NAME>` in the package, the suites, the test
runner and the GPU workflows; the documentation's are the backticked `DPBENCH_<NAME>` anywhere under docs/.
"""

from __future__ import annotations

import re

from _docs_pages import DOCS, ROOT, pages

_NAME = re.compile(r"\bDPBENCH_[A-Z][A-Z0-9_]*\b")
# Python names that look like variables but are not read from the environment.
NOT_VARIABLES = {"DPBENCH_MARKERS"}
# Where the code that reads variables lives (python -m tools.soak_faults's DPBENCH_ENOSPC_AT drives a
# test-side plugin, not dpbench; the disturbed-trials validation command drives the test-side
# disturb_plugin.py, which reads its own).
SOURCES = [
    ROOT / "dpbench",
    ROOT / "suites",
    ROOT / "scripts" / "test",
    ROOT / "tests" / "conftest.py",
    ROOT / "tests" / "measure" / "disturb_plugin.py",
    # DPBENCH_VALIDATION=1 runs the tests that measure the machine or torchrun rather than dpbench.
    ROOT / "tests" / "measure" / "test_injected_disturbance.py",
    ROOT / "tests" / "cluster" / "test_exit_barrier.py",
    ROOT / "tests" / "docs" / "test_readme_examples.py",
    # The GPU workflows read repository variables (vars.DPBENCH_GPU_HOST) that docs/ci.md explains.
    ROOT / ".github" / "workflows",
]


def code_variables() -> set[str]:
    names: set[str] = set()
    for source in SOURCES:
        files = [source] if source.is_file() else sorted([*source.rglob("*.py"), *source.rglob("*.yml")])
        for path in files:
            names |= set(_NAME.findall(path.read_text()))
    return names - NOT_VARIABLES


def documented_variables() -> set[str]:
    return {m for text in pages().values() for m in re.findall(r"`(DPBENCH_[A-Z0-9_]+)", text)}


def test_the_code_reads_variables():
    assert {"DPBENCH_PROFILE", "DPBENCH_TRIALS", "DPBENCH_EXIT_BARRIER_GRACE"} <= code_variables()


def test_every_variable_the_code_reads_is_documented():
    missing = code_variables() - documented_variables()
    assert not missing, f"not documented anywhere under {DOCS.name}/: {sorted(missing)}"


def test_the_pages_name_no_variable_the_code_does_not_read():
    stale = documented_variables() - code_variables()
    assert not stale, f"documented but read nowhere in the code: {sorted(stale)}"
