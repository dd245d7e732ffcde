"""Starting a pool's worker processes: the checks and retries around ``Process.start()``.

Before the forkserver helper opens its Unix socket, :func:`check_socket_dir` refuses a temp
directory whose path would be too long for that socket, in one readable line instead of an error
deep inside ``multiprocessing``. :func:`start_process` starts one worker and, under the forkserver
method, tries once more when the helper died under the first start (``multiprocessing`` launches a
fresh helper on the second try). :class:`~dpbench.workers.pool.WorkerPool` uses both.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from typing import Any

from dpbench.workers.forkserver import START_METHOD as _START_METHOD

__all__ = ["check_socket_dir", "start_process"]


# The longest path a Unix socket may have (``sun_path``, its NUL included: 108 bytes on Linux, 104
# on macOS and the BSDs).
_SOCKET_PATH_MAX = 107 if sys.platform.startswith("linux") else 103


def check_socket_dir(directory: str) -> None:
    """Refuse, in one line, a temp directory too long for the forkserver's socket.

    multiprocessing names that socket ``<its temp dir>/listener-XXXXXXXX`` under ``TMPDIR``; a
    longer path fails deep inside multiprocessing with "AF_UNIX path too long" instead.
    """
    length = len(os.fsencode(os.path.join(directory, "listener-" + "x" * 8)))
    if length > _SOCKET_PATH_MAX:
        raise ValueError(
            f"the temp directory {tempfile.gettempdir()!r} is too long for the forkserver's Unix "
            f"socket ({length} bytes under {directory}, at most {_SOCKET_PATH_MAX}): set TMPDIR to "
            f"a shorter directory"
        )


def start_process(proc: Any, rank: int) -> None:
    """``proc.start()``, once more if the forkserver helper died under it (the second start
    launches a fresh helper: ``multiprocessing`` checks that the old one is alive first)."""
    try:
        proc.start()
        return
    except (EOFError, ConnectionError, FileNotFoundError) as exc:
        if _START_METHOD != "forkserver":
            raise
        first = exc
    time.sleep(0.05)
    try:
        proc.start()
    except (EOFError, ConnectionError, FileNotFoundError) as exc:
        raise RuntimeError(
            f"could not start worker rank {rank}: the forkserver helper died twice while "
            f"starting it ({type(first).__name__}, then {type(exc).__name__}: {exc})"
        ) from exc
