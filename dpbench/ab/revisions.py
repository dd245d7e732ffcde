"""Two revisions of one git checkout, ready to run: a detached worktree and an environment each.

Used by ``dpbench ab``. Each revision's environment is made by *its own* ``scripts/setup-env``
(the revision decides what it needs); revisions whose lock (``pyproject.toml`` +
``constraints.txt``, hashed the way setup-env stamps it) is the same share one environment, kept
under ``<envs>/<lock>`` for later runs. Because a shared environment's editable install points
at whichever worktree set it up first (and that worktree is removed afterwards), every command
of a revision must run with ``PYTHONPATH=<its worktree>`` (``dpbench.ab.job.invocation_env``), so
``import dpbench`` resolves to that revision's source.

Child processes run in their own process group and are stopped (SIGINT, then SIGKILL) with it,
so an interrupt leaves nothing behind; a child dies with us even when we are SIGKILLed
(:func:`dpbench._children.dies_with_us`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dpbench._children import dies_with_us, wait_stopping

__all__ = [
    "ABError",
    "Revision",
    "SuiteFailed",
    "cleanup",
    "find_checkout",
    "lock_hash",
    "log_tail",
    "prepare",
    "resolve_commit",
    "run_logged",
    "say",
]

LOG_TAIL_LINES = 30


class ABError(Exception):
    """Unusable input (a revision, the checkout, an option): one line, exit 2."""


class SuiteFailed(Exception):
    """A revision's set-up or one of its invocations failed: one line plus the log's tail."""


@dataclass(kw_only=True)
class Revision:
    """One side of the comparison, prepared."""

    side: str  # "base" or "head"
    rev: str  # as the user wrote it
    commit: str
    worktree: Path
    storage: Path  # pytest-benchmark storage of this side's runs
    python: Path | None = None
    lock: str | None = None
    runs: list[Path] = field(default_factory=list)
    # An environment side (``--base-python PATH``, ``--head-requirements FILE``) as its label names it.
    environment: str | None = None
    # False for a worktree this side only borrows: the checkout itself, or the other side's.
    owns_worktree: bool = True

    @property
    def label(self) -> str:
        if self.environment is not None:
            return f"{self.side} ({self.environment})"
        return f"{self.side} ({self.rev} = {self.commit[:10]})"


def _git(repo: Path, *args: str) -> str:
    try:
        proc = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300
        )
    except FileNotFoundError:
        raise ABError("git was not found on PATH (dpbench ab prepares the revisions with git worktrees)") from None
    if proc.returncode != 0:
        detail = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise ABError(f"git {' '.join(args)} failed: {detail}")
    return proc.stdout.strip()


def find_checkout(directory: Path) -> Path:
    try:
        return Path(_git(directory, "rev-parse", "--show-toplevel"))
    except ABError:
        raise ABError(
            f"not a git checkout: {directory} (run dpbench ab inside the repository whose revisions it compares)"
        ) from None


def resolve_commit(repo: Path, rev: str) -> str:
    # A name starting with "-" would be read by git as an option.
    if not rev or rev.startswith("-"):
        raise ABError(f"unknown revision {rev!r} in {repo}")
    try:
        return _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except ABError:
        raise ABError(f"unknown revision {rev!r}: git finds no commit by that name in {repo}") from None


def lock_hash(worktree: Path) -> str:
    """sha256 of pyproject.toml + constraints.txt, byte for byte what scripts/setup-env stamps."""
    digest = hashlib.sha256()
    for name in ("pyproject.toml", "constraints.txt"):
        path = worktree / name
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


def say(text: str) -> None:
    print(f"dpbench ab: {text}", file=sys.stderr, flush=True)


def log_tail(log: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _sigint_stops() -> None:
    """In the child, before exec: SIGINT back to its default, even where we were started with it
    ignored (a background job of a script), since SIGINT is how we ask the child to stop."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_logged(cmd: Sequence[str], *, cwd: Path, env: dict[str, str], log: Path) -> int:
    """Run ``cmd`` in its own process group with its output in ``log``; nothing of it outlives this."""
    with open(log, "ab") as out:
        # Its own session: the terminal's Ctrl-C reaches only us, and we stop the whole group
        # (pytest, its forkserver and workers) ourselves, in order, then make sure it is gone.
        proc = subprocess.Popen(
            list(cmd),
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=dies_with_us(_sigint_stops),
        )
        try:
            # A stop SIGINTs the group (pytest stops its workers), SIGKILLs it after a grace period.
            return wait_stopping(proc, group=True)
        finally:
            # Whatever the group left behind (a worker orphaned by a crash) goes with it.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock: two ab runs never set up the same shared environment at once."""
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _setup_env(rev: Revision, *, envs: Path, logs: Path) -> None:
    script = rev.worktree / "scripts" / "setup-env"
    if not script.is_file():
        raise SuiteFailed(
            f"{rev.label} has no scripts/setup-env to make its environment "
            "(pass --python to run both revisions with an existing interpreter)"
        )
    rev.lock = lock_hash(rev.worktree)
    envs.mkdir(parents=True, exist_ok=True)
    env_dir = envs / rev.lock[:16]
    log = logs / f"setup-{rev.side}.log"
    started = time.monotonic()
    with _locked(envs / f"{rev.lock[:16]}.lock"):
        fresh = not (env_dir / "bin" / "python").exists()
        say(f"{rev.label}: {'creating' if fresh else 'reusing'} environment {env_dir} (log: {log})")
        if fresh:
            # setup-env would make .venv itself, but venv refuses to create one through a symlink:
            # make it here as setup-env does ("$PYTHON" -m venv); setup-env then installs into it.
            shutil.rmtree(env_dir, ignore_errors=True)  # what an interrupted run left half made
            python = os.environ.get("PYTHON", "python3")
            code = run_logged([python, "-m", "venv", str(env_dir)], cwd=rev.worktree, env=dict(os.environ), log=log)
            if code != 0:
                raise SuiteFailed(
                    f"{rev.label}: {python} -m venv {env_dir} failed (exit {code}); log: {log}\n{log_tail(log)}"
                )
        # The revision's own setup-env installs what it needs into .venv, here the shared one
        # (its stamp of the lock makes this a quick check when the environment is up to date).
        (rev.worktree / ".venv").symlink_to(env_dir, target_is_directory=True)
        code = run_logged(["bash", str(script)], cwd=rev.worktree, env=dict(os.environ), log=log)
    if code != 0 or not (env_dir / "bin" / "python").exists():
        raise SuiteFailed(f"{rev.label}: scripts/setup-env failed (exit {code}); log: {log}\n{log_tail(log)}")
    rev.python = rev.worktree / ".venv" / "bin" / "python"
    say(f"{rev.label}: environment ready in {time.monotonic() - started:.0f} s")


def prepare(
    *,
    repo: Path,
    revs: dict[str, str],
    run_dir: Path,
    envs: Path,
    python: Path | None = None,
    revisions: list[Revision] | None = None,
) -> list[Revision]:
    """Worktree and environment per side. ``revisions`` (when given) is filled as they are made,
    so a caller's cleanup can remove what exists even if this is interrupted halfway."""
    commits = {side: resolve_commit(repo, rev) for side, rev in revs.items()}
    made = revisions if revisions is not None else []
    logs = run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    for side, rev in revs.items():
        worktree = run_dir / "worktrees" / side
        worktree.parent.mkdir(parents=True, exist_ok=True)
        # Recorded first: cleanup removes a worktree that an interrupt left half made.
        made.append(Revision(side=side, rev=rev, commit=commits[side], worktree=worktree, storage=run_dir / side))
        _git(repo, "worktree", "add", "--detach", "--quiet", str(worktree), commits[side])
    for rev in made:
        if python is not None:
            rev.python = python
        else:
            _setup_env(rev, envs=envs, logs=logs)
        _compile_sources(rev, logs=logs)
    return made


def _compile_sources(rev: Revision, *, logs: Path) -> None:
    """Compile the side's package and suites once: where PYTHONDONTWRITEBYTECODE is set (CI images,
    containers) no process writes them, and every session of every trial would compile what it
    imports again. Outside the timed steps either way; a failure here is left to the sessions to say."""
    run_logged(
        [str(rev.python), "-m", "compileall", "-q", "dpbench", "suites"],
        cwd=rev.worktree,
        env=dict(os.environ),
        log=logs / f"compile-{rev.side}.log",
    )


def cleanup(repo: Path, revisions: Sequence[Revision]) -> None:
    """Remove the worktrees this job made (the shared environments, the saved runs and a checkout
    that environment sides ran in stay)."""
    revisions = [rev for rev in revisions if rev.owns_worktree]
    for rev in revisions:
        venv = rev.worktree / ".venv"
        if venv.is_symlink():
            venv.unlink()  # the link only: the environment is shared and kept
        try:
            _git(repo, "worktree", "remove", "--force", str(rev.worktree))
        except ABError:
            shutil.rmtree(rev.worktree, ignore_errors=True)
    with contextlib.suppress(ABError):
        _git(repo, "worktree", "prune")
    for rev in revisions:
        with contextlib.suppress(OSError):
            rev.worktree.parent.rmdir()  # worktrees/, once empty
