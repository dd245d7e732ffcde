"""What differs between the two sides of ``dpbench ab``: collected once per side, said in the verdict's first lines.

:func:`probe` runs :mod:`dpbench.ab.side_probe` in a side's interpreter (with the side's own
invocation environment) and returns its facts: torch version and build, CUDA, cuDNN, NCCL, Python,
driver, every installed package's version, the machine as that interpreter sees it. A side that
cannot import what a trial needs fails here, before anything is measured.
:func:`provenance_lines` turns two sides' facts into the lines the verdict opens with;
:func:`package_diff` is the exact package comparison; :func:`unasked_differences` names what the
job did not set out to compare (the host, the CPUs, the GPUs) but found different.
The report reads the same facts from saved runs' ``machine_info`` and shows them with these functions.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpbench.ab.revisions import SuiteFailed
from dpbench.workers import machine as _machine_module

__all__ = [
    "PackageChange",
    "package_diff",
    "probe",
    "provenance_lines",
    "side_summary",
    "unasked_differences",
]

PROBE = Path(__file__).with_name("side_probe.py")
PROBE_TIMEOUT_S = 600.0  # a cold import of a CUDA build of torch from a slow disk
SHOWN_PACKAGES = 10  # named in the verdict's line; every one is in provenance.json
# Shown in the headline itself, not among the "other packages".
HEADLINE_PACKAGES = frozenset({"torch"})
# What the sides may differ in by design (the environment) and what they should not (the machine).
UNASKED = (("node", "host"), ("cpu_count", "CPUs"), ("cpu_model", "CPU model"), ("gpus", "GPUs"))


@dataclass(frozen=True, kw_only=True)
class PackageChange:
    """One package whose version differs between the sides; None where a side does not have it."""

    name: str
    base: str | None
    head: str | None

    def __str__(self) -> str:
        return f"{self.name} {self.base or '(absent)'} → {self.head or '(absent)'}"


def probe(python: Path, *, env: dict[str, str], cwd: Path, what: str) -> dict[str, Any]:
    """The side's facts, or :class:`SuiteFailed` naming ``what`` (the side and its interpreter) and what failed."""
    # As -c, not as a script: a script's directory comes first on sys.path, and this package's
    # keyword.py would shadow the standard library's.
    cmd = [str(python), "-c", PROBE.read_text(), str(Path(_machine_module.__file__))]
    try:
        proc = subprocess.run(
            cmd, cwd=cwd, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=PROBE_TIMEOUT_S
        )
    except OSError as exc:  # not executable after all, a bad #! line, …
        raise SuiteFailed(f"{what}: cannot run it ({exc.strerror or exc})") from None
    except subprocess.TimeoutExpired:
        raise SuiteFailed(
            f"{what}: did not answer within {PROBE_TIMEOUT_S:.0f} s (importing torch and dpbench)"
        ) from None
    lines = proc.stdout.strip().splitlines()
    try:
        facts = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        facts = None
    if isinstance(facts, dict) and "error" in facts:
        raise SuiteFailed(f"{what}: {facts['error']}")
    if proc.returncode != 0 or not isinstance(facts, dict):
        detail = (proc.stderr.strip().splitlines() or ["no error message"])[-1]
        raise SuiteFailed(f"{what}: does not run as a Python interpreter with torch (exit {proc.returncode}: {detail})")
    return facts


def package_diff(base: Mapping[str, str], head: Mapping[str, str]) -> list[PackageChange]:
    """Every package whose version differs between the sides (absent on one side included), by name;
    the packages the headline names (torch) are left out."""
    names = sorted((set(base) | set(head)) - HEADLINE_PACKAGES)
    return [PackageChange(name=n, base=base.get(n), head=head.get(n)) for n in names if base.get(n) != head.get(n)]


def side_summary(facts: Mapping[str, Any]) -> str:
    """``torch 2.14.1+cu130 (CUDA 13.0, cuDNN 91300, NCCL 2.27.7, git 1a2b3c4d5e), Python 3.11.7, driver 580.65``."""
    build = [str(facts.get("torch_build") or "build unknown")]
    for key, label in (("cudnn", "cuDNN"), ("nccl", "NCCL")):
        if facts.get(key):
            build.append(f"{label} {facts[key]}")
    if facts.get("torch_git"):
        build.append(f"git {str(facts['torch_git'])[:10]}")
    text = f"torch {facts.get('torch', 'unknown')} ({', '.join(build)}), Python {facts.get('python', 'unknown')}"
    return text + (f", driver {facts['driver']}" if facts.get("driver") else "")


def _shown(value: Any) -> str:
    if value is None or value == []:
        return "none"
    return ", ".join(map(str, value)) if isinstance(value, list) else str(value)


def unasked_differences(base: Mapping[str, Any], head: Mapping[str, Any]) -> list[str]:
    """What the sides differ in that an environment A/B does not compare: ``CPUs: base 2, head 1``."""
    return [
        f"{label}: base {_shown(base.get(key))}, head {_shown(head.get(key))}"
        for key, label in UNASKED
        if base.get(key) != head.get(key)
    ]


def provenance_lines(
    base: Mapping[str, Any],
    head: Mapping[str, Any],
    *,
    same_environment: bool = False,
    saved: Path | None = None,
    names: tuple[str, str] = ("base", "head"),
) -> list[str]:
    """The lines the verdict opens with: each side's torch and build, the other packages that differ,
    an A/A said as such; ``saved`` (where every difference is written) is named when not all are shown;
    ``names``: what the two sides are called (the report names runs)."""
    b, h = names
    if same_environment:
        return [f"{b} and {h}: the same environment, {side_summary(base)}: an A/A comparison (expect no regression)"]
    changes = package_diff(base.get("packages") or {}, head.get("packages") or {})
    first = f"{b}: {side_summary(base)} · {h}: {side_summary(head)}"
    if not changes:
        lines = [f"{first}; no other package differs"]
    else:
        listed = ", ".join(map(str, changes[:SHOWN_PACKAGES]))
        more = len(changes) - SHOWN_PACKAGES
        where = f" in {saved}" if saved is not None else ""
        tail = f", … ({more} more{where})" if more > 0 else ""
        lines = [f"{first}; {len(changes)} other package{'s' if len(changes) != 1 else ''} differ: {listed}{tail}"]
    if base.get("sitecustomize") != head.get("sitecustomize"):
        lines.append(
            f"sitecustomize: base {_shown(base.get('sitecustomize'))}, head {_shown(head.get('sitecustomize'))}"
        )
    if not changes and side_summary(base) == side_summary(head) and len(lines) == 1:
        lines[0] += " (no version differs: an A/A unless the sides differ in something not recorded here)"
    return lines
