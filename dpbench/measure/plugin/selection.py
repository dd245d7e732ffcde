"""Which pytest sessions the measuring plugin measures: those that run dpbench's suites, or that
ask for it (``--dpbench``). Light on purpose: every pytest session asks."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

__all__ = ["SUITES_PACKAGE", "measures", "suites_dir"]

SUITES_PACKAGE = "dpbench.suites"


def suites_dir() -> Path | None:
    """The suites of the dpbench being imported: ``dpbench/suites`` of an installed package, or
    ``suites/`` beside the ``dpbench/`` of a checkout (a worktree's own under ``PYTHONPATH``, as
    ``dpbench ab`` runs each revision: not whichever checkout an editable install points at)."""
    package = Path(__file__).resolve().parents[2]  # dpbench/ (this file: dpbench/measure/plugin/)
    for candidate in (package / "suites", package.parent / "suites"):
        if (candidate / "__init__.py").is_file():
            return candidate
    return None


def measures(paths: Sequence[str], *, asked: bool, invocation_dir: Path, suites: Path | None) -> bool:
    """Does this session measure? ``paths``: pytest's positional arguments (files, directories,
    node ids, or module names with --pyargs); none means the invocation directory."""
    if asked:
        return True
    if suites is None:
        return False
    for arg in paths or ["."]:
        if arg == SUITES_PACKAGE or arg.startswith(SUITES_PACKAGE + "."):
            return True
        where = (invocation_dir / arg.split("::")[0]).resolve()
        if where == suites or suites in where.parents:
            return True
    return False
