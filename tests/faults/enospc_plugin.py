"""A pytest plugin (``-p enospc_plugin``, with this folder on PYTHONPATH) that makes the disk
under the benchmark storage "full": the first write there that reaches ``DPBENCH_ENOSPC_AT``
(``json``: the run file, ``timelines``: the published timelines; default ``json``) writes half
its bytes, then raises ``OSError(ENOSPC)`` — what a full disk does to a write. Used where no
small tmpfs can be mounted (issue 18's soak and its tests)."""

from __future__ import annotations

import builtins
import errno
import io
import os

_real_open = builtins.open
_STATE = {"root": None, "at": os.environ.get("DPBENCH_ENOSPC_AT", "json"), "fired": False}


class _FullDisk:
    def __init__(self, f, path: str):
        self._f, self._path = f, path

    def write(self, data):
        if _STATE["fired"]:
            return self._f.write(data)
        _STATE["fired"] = True
        self._f.write(data[: max(1, len(data) // 2)])
        self._f.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self._path)

    def fileno(self):  # no fast copy (sendfile) around the full disk: shutil falls back to write()
        raise OSError(errno.EBADF, "no fileno for a full disk")

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()
        return False

    def __iter__(self):
        return iter(self._f)


def _targeted(path: str) -> bool:
    root = _STATE["root"]
    if root is None or _STATE["fired"]:
        return False
    path = os.path.abspath(path)
    if not path.startswith(root + os.sep):
        return False
    is_run = path.endswith(".json") and os.sep + "timelines" + os.sep not in path
    return is_run if _STATE["at"] == "json" else (os.sep + "timelines" + os.sep in path)


def _open(file, mode="r", *args, **kwargs):
    f = _real_open(file, mode, *args, **kwargs)
    if isinstance(file, (str, bytes, os.PathLike)) and any(c in mode for c in "wax") and _targeted(os.fsdecode(file)):
        return _FullDisk(f, os.fsdecode(file))
    return f


def pytest_configure(config):
    storage = config.getoption("benchmark_storage", None) or ""
    if storage.startswith("file://"):
        _STATE["root"] = os.path.abspath(os.path.expanduser(storage[len("file://") :]))
        builtins.open = io.open = _open  # pathlib's Path.open calls io.open


def pytest_unconfigure(config):
    builtins.open = io.open = _real_open
