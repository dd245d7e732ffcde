"""A stand-in for ``dpbench.cluster`` whose start is slow, for the start-up check-in tests.

Run by torchrun in place of the real module on one node: it opens the real start-up check-in
(as the cluster runner's main() does, before torch is imported) and then sleeps, as a node importing
torch under load would, printing ``slow start: checked in`` (an agent) or ``slow start: rank 1 checked
in`` (the head) once the check-in is done, so a test knows when to kill it."""

from __future__ import annotations

import os
import sys
import time

from dpbench.cluster.checkin import port_setting
from dpbench.cluster.main import _start_checkin
from dpbench.cluster.node import ClusterInfo

info = ClusterInfo.from_environ(os.environ)
checkin = _start_checkin(info, port_setting(os.environ), f"rank {info.rank}, node {info.node_rank}")
if checkin is None:
    sys.exit("slow start: no check-in")
deadline = time.monotonic() + 120
said = False
while time.monotonic() < deadline:
    if not said and info.rank == 0 and 1 in checkin.checked_in:
        print("slow start: rank 1 checked in", flush=True)
        said = True
    if not said and info.rank != 0 and checkin.state == "checked-in":
        print("slow start: checked in", flush=True)
        said = True
    time.sleep(0.05)
