"""A parent that opens a WorkerPool, reports it, then waits to be killed (run by test_lifeline.py).

``python -m tests.workers._orphan_parent idle|call|stage|alone`` (from the checkout's root):
between calls, inside a call that hangs on rank 0, with a registered staging directory (as the
suites' timeline store) and no pool at all, or inside a hanging call with the reaper killed first
(the workers' own parent watch alone).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

from dpbench.launcher import WorkerPool
from dpbench.workers.lifeline import reaper
from tests._launch_helpers import sleep_on


def main(mode: str) -> None:
    staged = tempfile.mkdtemp(prefix="dpbench-timelines-")
    reaper().register(staged)
    pool = None if mode == "stage" else WorkerPool(2, timeout=600.0)
    if mode == "alone":
        # One object: a second reaper() call made once this one is dead starts a new reaper, and
        # waiting on that one never ends (seen: a 300 s hang under a loaded machine).
        lifeline = reaper()
        lifeline.proc.kill()
        lifeline.proc.wait()
        os.rmdir(staged)
        staged = None
    print(
        json.dumps({"pids": pool.pids if pool else [], "rdzv": pool._tmpdir if pool else None, "staged": staged}),
        flush=True,
    )
    if mode in ("call", "alone"):
        pool.run(sleep_on, 0)
    time.sleep(600)


if __name__ == "__main__":
    main(sys.argv[1])
