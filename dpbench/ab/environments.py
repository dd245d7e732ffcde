"""The sides of ``dpbench ab``: two revisions, or two environments running one revision.

A side is a *revision* (``BASE_REV HEAD_REV``: a worktree each, each set up from its own lock) or an
*environment*: ``--base-python PATH`` (an interpreter that exists, with torch, pytest-benchmark and
the revision's dependencies) or ``--base-requirements FILE`` (a virtual environment made from the
file: ``pip install -r FILE``, then the revision's dpbench with its test extra, kept under
``<envs>/req-<sha256 of the file>`` for later jobs). Environment sides both run one revision: the
checkout as it is (uncommitted changes included), or ``--rev REV`` in one worktree.

The rule for mixing: either two revisions (``--python`` may give both one interpreter) or an
environment on each side (``--rev`` may pick the revision); a revision on one side and an
environment on the other, an environment side given twice, or a half-given pair is refused with
one line (exit 2). The same environment on both sides is allowed: an A/A.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from dpbench.ab.revisions import (
    ABError,
    Revision,
    SuiteFailed,
    _git,
    _locked,
    log_tail,
    resolve_commit,
    run_logged,
    say,
)

__all__ = [
    "SideSpec",
    "check_interpreter",
    "parse_sides",
    "prepare_environments",
    "requirements_env",
    "same_environment",
]

BASE, HEAD = "base", "head"
INSTALLED = ".dpbench-installed"  # written last: a venv without it was left half made


@dataclass(frozen=True, kw_only=True)
class SideSpec:
    """What one side runs: a revision (``rev``) or an environment (``python`` or ``requirements``)."""

    side: str
    """``base`` or ``head``."""
    rev: str | None = None
    """The revision, as the user wrote it (revision sides only)."""
    python: Path | None = None
    """``--<side>-python``: an existing interpreter."""
    requirements: Path | None = None
    """``--<side>-requirements``: the file a virtual environment is made from."""

    @property
    def environment(self) -> str | None:
        """How the side's environment is named in its label (None for a revision side)."""
        if self.python is not None:
            return f"--{self.side}-python {self.python}"
        if self.requirements is not None:
            return f"--{self.side}-requirements {self.requirements}"
        return None


def _given(value: str | None) -> bool:
    return value is not None


def parse_sides(
    *,
    revs: list[str],
    base_python: str | None = None,
    head_python: str | None = None,
    base_requirements: str | None = None,
    head_requirements: str | None = None,
    rev: str | None = None,
    python: str | None = None,
) -> tuple[SideSpec, SideSpec]:
    """The two sides from the command line, or :class:`ABError` (one line) for a contradictory mix."""
    options = {
        BASE: {"python": base_python, "requirements": base_requirements},
        HEAD: {"python": head_python, "requirements": head_requirements},
    }
    for side, given in options.items():
        if _given(given["python"]) and _given(given["requirements"]):
            raise ABError(f"--{side}-python and --{side}-requirements: expected one environment for {side}, found both")
    named = [f"--{side}-{kind}" for side, given in options.items() for kind, v in given.items() if _given(v)]
    if len(revs) not in (0, 2):
        raise ABError(f"BASE_REV HEAD_REV: expected two revisions (or none, with environment sides), found {revs!r}")
    if revs:
        if named:
            raise ABError(
                f"{named[0]}: a side is a revision or an environment, not both: BASE_REV HEAD_REV name revisions "
                "(each set up from its own lock); to compare environments drop them and pick the revision with --rev"
            )
        if rev is not None:
            raise ABError("--rev: expected only with environment sides; BASE_REV HEAD_REV already name the revisions")
        return SideSpec(side=BASE, rev=revs[0]), SideSpec(side=HEAD, rev=revs[1])
    if not named:
        raise ABError(
            "expected BASE_REV HEAD_REV, or an environment per side (--base-python or --base-requirements, "
            "and --head-python or --head-requirements), found neither"
        )
    if python is not None:
        raise ABError(
            "--python: expected only with BASE_REV HEAD_REV (one interpreter for both revisions); with environment "
            "sides name each side's interpreter (--base-python, --head-python)"
        )
    sides = []
    for side, given in options.items():
        if not any(_given(v) for v in given.values()):
            other = named[0]
            raise ABError(
                f"--{side}-python or --{side}-requirements: expected an environment for {side} too "
                f"({other} gives the other side's), found none"
            )
        requirements = given["requirements"]
        if requirements is not None and not Path(requirements).is_file():
            raise ABError(f"--{side}-requirements: expected a requirements file, found no file at {requirements}")
        sides.append(
            SideSpec(
                side=side,
                python=Path(given["python"]).absolute() if given["python"] is not None else None,
                requirements=Path(requirements).absolute() if requirements is not None else None,
            )
        )
    return sides[0], sides[1]


def same_environment(base: SideSpec, head: SideSpec) -> bool:
    """Both sides name one interpreter (by path, not resolved: two venvs link the same base Python)
    or one requirements file's content."""
    if base.python is not None and head.python is not None:
        return os.path.normpath(base.python) == os.path.normpath(head.python)
    if base.requirements is not None and head.requirements is not None:
        return _file_hash(base.requirements) == _file_hash(head.requirements)
    return False


def check_interpreter(spec: SideSpec) -> None:
    """A ``--<side>-python`` that is not there or cannot be run: :class:`SuiteFailed` (exit 4), one line.
    (Whether it imports torch and dpbench is the probe's question: :func:`dpbench.ab.provenance.probe`.)"""
    path = spec.python
    if path is None:
        return
    if not path.exists():
        raise SuiteFailed(f"{spec.side}: --{spec.side}-python {path}: no such file")
    if path.is_dir():
        raise SuiteFailed(f"{spec.side}: --{spec.side}-python {path}: is a directory, expected an interpreter")
    if not os.access(path, os.X_OK):
        raise SuiteFailed(f"{spec.side}: --{spec.side}-python {path}: not executable")


def _file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _pip_error(log: Path) -> str:
    """pip's last ``ERROR:`` line (what it could not resolve or install), else the log's last line."""
    lines = [line.strip() for line in log_tail(log, 400).splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR:")]
    return (errors or lines or ["no output"])[-1][:300]


def requirements_env(spec: SideSpec, *, checkout: Path, envs: Path, logs: Path) -> Path:
    """The interpreter of the environment made from ``spec.requirements`` (made now, or kept from an
    earlier job with the same file). pip's failure: :class:`SuiteFailed` with pip's last error line,
    and the half-made environment removed."""
    assert spec.requirements is not None
    digest = _file_hash(spec.requirements)
    envs.mkdir(parents=True, exist_ok=True)
    env_dir = envs / f"req-{digest[:16]}"
    python = env_dir / "bin" / "python"
    log = logs / f"setup-{spec.side}.log"
    started = time.monotonic()
    with _locked(envs / f"req-{digest[:16]}.lock"):
        stamp = env_dir / INSTALLED
        if stamp.is_file() and stamp.read_text().strip() == digest and python.exists():
            say(f"{spec.side}: reusing environment {env_dir} for {spec.requirements}")
            return python
        say(f"{spec.side}: creating environment {env_dir} from {spec.requirements} (log: {log})")
        shutil.rmtree(env_dir, ignore_errors=True)  # what an interrupted or failed job left half made
        creator = os.environ.get("PYTHON", "python3")
        steps = [
            [creator, "-m", "venv", str(env_dir)],
            # The user's environment first, as the file says; then the revision's dpbench and what its
            # suites need, which keeps whatever the file installed where it satisfies them.
            [str(python), "-m", "pip", "install", "-r", str(spec.requirements)],
            [str(python), "-m", "pip", "install", "-e", f"{checkout}[test]"],
        ]
        try:
            for cmd in steps:
                code = run_logged(cmd, cwd=checkout, env=dict(os.environ), log=log)
                if code != 0:
                    what = "pip could not install it" if "pip" in cmd else f"{creator} -m venv failed"
                    raise SuiteFailed(
                        f"{spec.side}: --{spec.side}-requirements {spec.requirements}: {what} "
                        f"({_pip_error(log)}); nothing measured; log: {log}"
                    )
            stamp.write_text(digest + "\n")
        finally:
            if not stamp.is_file():
                shutil.rmtree(env_dir, ignore_errors=True)
    say(f"{spec.side}: environment ready in {time.monotonic() - started:.0f} s")
    return python


def prepare_environments(
    *,
    repo: Path,
    sides: tuple[SideSpec, SideSpec],
    rev: str | None,
    run_dir: Path,
    envs: Path,
    revisions: list[Revision],
) -> list[Revision]:
    """Both environment sides, running one revision: the checkout itself (``rev`` None) or one worktree
    of ``rev``. ``revisions`` is filled as they are made (the caller's cleanup removes what exists)."""
    for spec in sides:
        check_interpreter(spec)  # before anything is made
    logs = run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    if rev is None:
        commit, worktree, owned = resolve_commit(repo, "HEAD"), repo, False
    else:
        commit, worktree, owned = resolve_commit(repo, rev), run_dir / "worktrees" / "rev", True
    for spec in sides:
        revisions.append(
            Revision(
                side=spec.side,
                rev=rev or "the checkout",
                commit=commit,
                worktree=worktree,
                storage=run_dir / spec.side,
                environment=spec.environment,
                # One worktree for both sides: base's to remove.
                owns_worktree=owned and spec.side == BASE,
            )
        )
    if owned:
        worktree.parent.mkdir(parents=True, exist_ok=True)
        _git(repo, "worktree", "add", "--detach", "--quiet", str(worktree), commit)
    for spec, made in zip(sides, revisions):
        made.python = spec.python or requirements_env(spec, checkout=worktree, envs=envs, logs=logs)
    return revisions
