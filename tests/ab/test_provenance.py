"""What differs between two sides: the package diff exact on known lists, the verdict's first lines,
the warnings for what was not asked to compare, and the probe in a real interpreter."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from dpbench.ab.provenance import (
    PackageChange,
    package_diff,
    probe,
    provenance_lines,
    side_summary,
    unasked_differences,
)
from dpbench.ab.revisions import SuiteFailed
from dpbench.workers.machine import installed_packages, software_facts

REPO = Path(__file__).resolve().parents[2]

STABLE = {
    "torch": "2.13.0+cpu",
    "numpy": "2.2.6",
    "filelock": "3.20.0",
    "sympy": "1.14.0",
    "typing-extensions": "4.15.0",
}
NIGHTLY = {
    "torch": "2.14.1+cu130",
    "numpy": "2.2.6",
    "filelock": "3.20.3",
    "sympy": "1.14.0",
    "typing-extensions": "4.15.0",
    "nvidia-cublas": "13.0.0.19",
    "triton": "3.6.0",
}
BASE = {
    "torch": "2.13.0+cpu",
    "torch_git": "cf30153c4c131c8164ee7798e5022d810682e2cb",
    "torch_build": "CPU",
    "cuda": None,
    "cudnn": None,
    "nccl": None,
    "python": "3.11.7",
    "packages": STABLE,
    "node": "vm",
    "cpu_count": 2,
    "cpu_model": "AMD EPYC",
    "gpus": [],
    "driver": None,
    "sitecustomize": None,
}
HEAD = {
    **BASE,
    "torch": "2.14.1+cu130",
    "torch_git": "0123456789abcdef",
    "torch_build": "CUDA 13.0",
    "cuda": "13.0",
    "cudnn": "92400",
    "nccl": "2.28.9",
    "packages": NIGHTLY,
}


def test_package_diff_is_exact_on_known_lists():
    assert package_diff(STABLE, NIGHTLY) == [
        PackageChange(name="filelock", base="3.20.0", head="3.20.3"),
        PackageChange(name="nvidia-cublas", base=None, head="13.0.0.19"),
        PackageChange(name="triton", base=None, head="3.6.0"),
    ]
    # Symmetric, and a package only the base has is "absent" on head.
    assert package_diff(NIGHTLY, STABLE)[1] == PackageChange(name="nvidia-cublas", base="13.0.0.19", head=None)
    assert str(package_diff(NIGHTLY, STABLE)[1]) == "nvidia-cublas 13.0.0.19 → (absent)"
    assert package_diff(STABLE, dict(STABLE)) == []
    assert package_diff({}, {}) == []


def test_side_summary_names_the_build():
    assert side_summary(BASE) == "torch 2.13.0+cpu (CPU, git cf30153c4c), Python 3.11.7"
    assert (
        side_summary({**HEAD, "driver": "580.95.05"})
        == "torch 2.14.1+cu130 (CUDA 13.0, cuDNN 92400, NCCL 2.28.9, git 0123456789), Python 3.11.7, driver 580.95.05"
    )


def test_the_verdicts_first_lines():
    assert provenance_lines(BASE, HEAD) == [
        "base: torch 2.13.0+cpu (CPU, git cf30153c4c), Python 3.11.7 · head: torch 2.14.1+cu130 (CUDA 13.0, "
        "cuDNN 92400, NCCL 2.28.9, git 0123456789), Python 3.11.7; 3 other packages differ: filelock 3.20.0 → "
        "3.20.3, nvidia-cublas (absent) → 13.0.0.19, triton (absent) → 3.6.0"
    ]
    many = {**NIGHTLY, **{f"pkg{i:02d}": "1.0" for i in range(12)}}
    (line,) = provenance_lines(BASE, {**HEAD, "packages": many}, saved=Path("/runs/*/provenance.json"))
    assert "; 15 other packages differ: filelock 3.20.0 → 3.20.3, " in line
    assert line.endswith("pkg07 (absent) → 1.0, … (5 more in /runs/*/provenance.json)"), line


def test_an_aa_is_said_as_such():
    assert provenance_lines(BASE, BASE, same_environment=True) == [
        "base and head: the same environment, torch 2.13.0+cpu (CPU, git cf30153c4c), Python 3.11.7: an A/A "
        "comparison (expect no regression)"
    ]
    # Two environments with the same versions: said, with what the provenance cannot see.
    assert provenance_lines(BASE, dict(BASE)) == [
        "base: torch 2.13.0+cpu (CPU, git cf30153c4c), Python 3.11.7 · head: torch 2.13.0+cpu (CPU, git "
        "cf30153c4c), Python 3.11.7; no other package differs (no version differs: an A/A unless the sides differ "
        "in something not recorded here)"
    ]
    site = {**BASE, "sitecustomize": "/slow/sitecustomize.py"}
    assert provenance_lines(BASE, site)[1:] == ["sitecustomize: base none, head /slow/sitecustomize.py"]


def test_unasked_differences_are_named():
    assert unasked_differences(BASE, HEAD) == []
    other = {**BASE, "cpu_count": 1, "gpus": ["NVIDIA H100 80GB HBM3"], "node": "gpu-7"}
    assert unasked_differences(BASE, other) == [
        "host: base vm, head gpu-7",
        "CPUs: base 2, head 1",
        "GPUs: base none, head NVIDIA H100 80GB HBM3",
    ]


def test_installed_packages_are_this_interpreters():
    import torch

    found = installed_packages()
    assert found["torch"] == torch.__version__
    assert all(name == name.lower() and "_" not in name for name in found)
    facts = software_facts()
    assert facts["packages"] == found and facts["torch"] == torch.__version__
    assert facts["torch_build"] == (f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU")


@pytest.mark.slow
def test_probe_in_this_interpreter_gives_its_facts(tmp_path):
    import torch

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    facts = probe(Path(sys.executable), env=env, cwd=REPO, what="base")
    assert facts["torch"] == torch.__version__ and facts["packages"]["torch"] == torch.__version__
    assert facts["cpu_count"] == len(os.sched_getaffinity(0)) and facts["sitecustomize"] is None
    assert facts["dpbench_path"] == str(REPO / "dpbench")
    with pytest.raises(
        SuiteFailed, match=r"^head: does not run as a Python interpreter with torch \(exit 1: no error message\)$"
    ):
        probe(Path("/bin/false"), env=env, cwd=REPO, what="head")
