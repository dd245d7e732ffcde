"""Environment that torch's OpenMP runtime reads once, when it loads: set it where that happens.

Workers fork from the forkserver helper, which imported torch (and so initialised libgomp)
when it started; libgomp reads ``OMP_WAIT_POLICY`` / ``GOMP_SPINCOUNT`` then and never
again, so setting them in a worker does nothing (as for ``OMP_NUM_THREADS``, which
``torch.set_num_threads`` overrides anyway). They must be in the environment the helper
starts with, which is the parent's environment at that moment.

Why ``OMP_WAIT_POLICY=PASSIVE``: by default a libgomp thread that reaches a barrier first
spins (300,000 iterations) before it sleeps. With every core given to intra-op threads, one
other busy process (the parent, the sampler, another job on a shared machine) deschedules
one of them, and its partner spins away the time slice the late thread needed. Measured on
the 2-core development machine under shared load: ``single`` on the mlp workload, 2 threads,
138-417 ms per step with the default against 31-38 ms with PASSIVE (1 thread: 28-42 ms),
and the between-trial CV over five cases fell from a median of 36-44 % to 17 %
(``scripts/bench_trial_cv.py``, 8 trials each, README). On an idle dedicated machine
spinning can save a little latency; a user setting of any of these variables wins.
"""
from __future__ import annotations

import contextlib
import os
from typing import Iterator, Mapping

__all__ = ["RUNTIME_DEFAULTS", "RUNTIME_VARIABLES", "runtime_env_patch", "patched_environ"]

RUNTIME_DEFAULTS = {"OMP_WAIT_POLICY": "PASSIVE"}
# Any of these set by the user means the user chose the wait behaviour: leave it alone.
RUNTIME_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")


def runtime_env_patch(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables to add for the forkserver helper (empty when the user set their own)."""
    if any(name in environ for name in RUNTIME_VARIABLES):
        return {}
    return dict(RUNTIME_DEFAULTS)


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
