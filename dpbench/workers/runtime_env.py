"""The OpenMP / MKL environment of the workers: the user's own, never one dpbench chose.

Workers fork from the forkserver helper, which imported torch (and so initialised libgomp)
when it started; libgomp reads ``OMP_WAIT_POLICY`` / ``GOMP_SPINCOUNT`` then and never
again. The helper starts with the parent's environment at that moment, so whatever the user
exported (``OMP_WAIT_POLICY=PASSIVE``, ``GOMP_SPINCOUNT=…``, ``KMP_BLOCKTIME``, ``MKL_*``) is what
the workers' OpenMP runs with, exactly as in the user's own ``python train.py``.

The pool exports no ``OMP_WAIT_POLICY=PASSIVE`` (nor any other wait setting) for the helper: that
would make the harness measure something a plain training script would not do, and only the cases
whose OpenMP team spans several threads (``single`` and the other two-thread cases, not
one-thread-per-rank ``ddp`` w2) would pay for it, biasing every "× single" (measurements:
docs/calibration.md#openmp-wait-policy). What makes spinning threads lose in a harness is the
harness itself (a heartbeat to the parent after every step, a sampler waking 20 times a second on
the workers' cores); those are kept quiet (``WorkerContext.heartbeat`` is rate-limited, the suites'
sampler samples less often without a spare core), and the default is the runtime's own. What the workers really ran with
is in each worker's facts (``runtime_env``) and so in every benchmark's ``extra_info``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping

__all__ = [
    "RUNTIME_DEFAULTS",
    "RUNTIME_PREFIXES",
    "RUNTIME_VARIABLES",
    "patched_environ",
    "runtime_env_patch",
    "user_runtime_env",
]

# Nothing: a setting a user's script would not have is never a silent default.
RUNTIME_DEFAULTS: dict[str, str] = {}
# The variables that decide how OpenMP threads wait; recorded when the user set them.
RUNTIME_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")
# ... and the C library's malloc (read when a process starts: ``MALLOC_TRIM_THRESHOLD_``,
# ``MALLOC_MMAP_THRESHOLD_``, ``GLIBC_TUNABLES``): how often freed memory goes back to the OS and is
# faulted in again moves a CPU step by 5-10% (see ``StepStats.minor_faults``), so a user's setting
# is recorded beside the OpenMP ones.
RUNTIME_PREFIXES = ("OMP_", "GOMP_", "KMP_", "MKL_", "MALLOC_", "GLIBC_TUNABLES")


def runtime_env_patch(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables dpbench adds for the forkserver helper: none (the user's environment stands)."""
    return {name: value for name, value in RUNTIME_DEFAULTS.items() if name not in environ}


def user_runtime_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The user's own OpenMP / MKL / malloc settings (what the workers' runtimes will read)."""
    return {k: v for k, v in sorted(environ.items()) if k.startswith(RUNTIME_PREFIXES)}


@contextlib.contextmanager
def patched_environ(patch: Mapping[str, str]) -> Iterator[None]:
    """Add ``patch`` to ``os.environ`` for the duration (processes started inside inherit it)."""
    added = [name for name in patch if name not in os.environ]
    os.environ.update({name: patch[name] for name in added})
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)
