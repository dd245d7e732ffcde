"""Output is complete or absent: files written atomically (a reader or a CI upload never sees half a
file), and no directory left behind that a command made and put nothing in."""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_write_text", "missing_root", "no_empty_directories", "remove_empty_tree"]


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to a temporary file beside ``path``, then ``os.replace`` it into place.

    The temporary file lives in the target's directory so the final rename stays on one
    filesystem, where it is atomic; on any failure it is removed and the old file is untouched.
    """
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise FileNotFoundError(errno.ENOENT, "the output directory does not exist", str(directory))
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())  # the data is on disk before the name points at it
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; an artifact should be readable like any file
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def missing_root(path: str | os.PathLike) -> Path | None:
    """The outermost directory that making ``path`` with its parents would create (None: it exists)."""
    path = Path(path).absolute()
    if path.exists():
        return None
    while not path.parent.exists() and path.parent != path.parent.parent:
        path = path.parent
    return path


def remove_empty_tree(directory: str | os.PathLike) -> bool:
    """Remove ``directory`` when it holds nothing but empty directories (removed too); whether it is
    gone. Anything else under it stays, and so do the directories on its way."""
    directory = Path(directory)
    try:
        entries = list(directory.iterdir())
    except OSError:  # gone already, or not a directory
        return not directory.exists()
    empty = True
    for entry in entries:
        if not (entry.is_dir() and not entry.is_symlink() and remove_empty_tree(entry)):
            empty = False
    if empty:
        with contextlib.suppress(OSError):  # something arrived meanwhile: it stays
            directory.rmdir()
            return True
    return False


@contextlib.contextmanager
def no_empty_directories(path: str | os.PathLike) -> Iterator[None]:
    """Around a block that may create the directory ``path`` (and its missing parents): whatever of
    them the block created and left empty is removed when it ends, however it ends. A directory that
    existed before, or holds a file, is never removed."""
    root = missing_root(path)
    try:
        yield
    finally:
        if root is not None:
            remove_empty_tree(root)
