"""Write output files atomically: a reader (or a CI upload) never sees half a file."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

__all__ = ["atomic_write_text"]


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
