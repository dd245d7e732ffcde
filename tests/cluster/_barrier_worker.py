"""A torchrun worker for tests/cluster/test_exit_barrier.py (run as ``torchrun ... _barrier_worker.py ROLE FLAG``).

``finish``: wait until the other node's worker runs (FLAG exists), leave dpbench's exit-barrier
watch behind as the cluster runner does, exit 0 (its torchrun then waits in the exit barrier).
``stay``: create FLAG and sleep (the test kills this node's whole tree: a node lost after its goodbye)."""

import os
import sys
import time

from dpbench.cluster import exit_watch

role, flag = sys.argv[1], sys.argv[2]
if role == "finish":
    while not os.path.exists(flag):
        time.sleep(0.05)
    exit_watch.start("node 0, host test, rank 0")
    sys.exit(0)
open(flag, "w").close()
time.sleep(600)
