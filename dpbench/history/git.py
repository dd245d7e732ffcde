"""What ``dpbench history`` asks git: the order of commits, a revision's descendants, the
repository's web address. Every call fails soft (None) outside a repository: history then
orders by date and says so."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

__all__ = ["commit_order", "descendants", "repo_url"]


def _git(*args: str, cwd: Path | None = None) -> str | None:
    try:
        proc = subprocess.run(
            ["git", *args], capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60, cwd=cwd
        )
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def commit_order(cwd: Path | None = None) -> list[str] | None:
    """Every commit reachable from HEAD, oldest first (topological), or None outside a repository."""
    out = _git("rev-list", "--topo-order", "--reverse", "HEAD", cwd=cwd)
    return out.split() if out is not None else None


def descendants(rev: str, cwd: Path | None = None) -> set[str] | None:
    """The commits after ``rev`` up to HEAD (``git rev-list REV..HEAD``); None if ``rev`` is unknown."""
    if rev.startswith("-"):
        return None  # a revision, never an option
    out = _git("rev-list", f"{rev}..HEAD", cwd=cwd)
    return set(out.split()) if out is not None else None


def repo_url(cwd: Path | None = None) -> str | None:
    """``https://host/owner/name`` from the ``origin`` remote (https or scp-like ssh), or None."""
    out = _git("remote", "get-url", "origin", cwd=cwd)
    if not out:
        return None
    url = out.strip()
    scp = re.fullmatch(r"[\w.-]+@([\w.-]+):(.+?)(\.git)?/?", url)
    if scp:
        return f"https://{scp.group(1)}/{scp.group(2)}"
    web = re.fullmatch(r"(https?)://(?:[^@/]+@)?([^/]+)/(.+?)(\.git)?/?", url)
    return f"{web.group(1)}://{web.group(2)}/{web.group(3)}" if web else None
