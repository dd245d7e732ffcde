"""A node lost after the session's goodbye: torchrun's exit barrier (300 s) would keep the other
node waiting; dpbench's exit watch stops that torchrun within 10 s, with one line naming the node."""

from __future__ import annotations

import os
import subprocess
import time
import uuid

import psutil
import pytest
from _torchrun import cluster_env, finish, start

pytestmark = pytest.mark.slow
WORKER = "tests/cluster/_barrier_worker.py"


def _lose_node_1_after_goodbye(tmp_path, wait: float = 20.0, **env):
    """Node 0's worker exits 0 (its torchrun enters the exit barrier) once node 1's runs; node 1
    is then killed whole. → (the cluster, node 0's exit code or None, seconds from the kill)."""
    marker = uuid.uuid4().hex
    flag = tmp_path / "node1-runs"
    cluster = start(
        tmp_path,
        [],
        env=cluster_env(marker, **env),
        modules=[[WORKER, "finish", str(flag)], [WORKER, "stay", str(flag)]],
    )
    deadline = time.monotonic() + 120
    while not flag.exists() and time.monotonic() < deadline and cluster.nodes[0].proc.poll() is None:
        time.sleep(0.05)
    assert flag.exists(), cluster.output()[-3000:]
    root = psutil.Process(cluster.nodes[1].proc.pid)
    for proc in [root] + root.children(recursive=True):
        proc.kill()
    killed = time.monotonic()
    try:
        code = cluster.nodes[0].proc.wait(wait)
    except subprocess.TimeoutExpired:
        code = None
    return cluster, marker, code, time.monotonic() - killed


@pytest.mark.serial  # a time bound: under pytest-xdist it runs alone
def test_the_other_node_exits_non_zero_within_10_s_naming_itself(tmp_path):
    cluster, marker, code, took = _lose_node_1_after_goodbye(tmp_path)
    codes, left = finish(cluster, marker, timeout=30)
    out = cluster.nodes[0].output()
    print(f"node 0 exited {code} {took:.1f} s after node 1 was killed")
    assert code not in (0, None), out[-3000:]
    assert took <= 10.0, (took, out[-3000:])
    assert "dpbench.cluster (node 0, host test, rank 0): torchrun (pid " in out, out[-3000:]
    assert "still waits in its exit barrier 6 s after this node's session ended" in out
    assert not left, [p.cmdline() for p in left]


@pytest.mark.skipif(
    os.environ.get("DPBENCH_VALIDATION") != "1",
    reason="torchrun's own behaviour, what the watch is for (docs/validation/faults.md): DPBENCH_VALIDATION=1",
)
def test_without_the_watch_torchrun_waits_in_its_barrier(tmp_path):
    """What the watch is for: with it off, node 0's torchrun is still waiting 12 s after the kill.
    It checks torchrun, not dpbench (a change in torchrun's barrier would show here), so it runs
    with the validation runs rather than in every suite run."""
    cluster, marker, code, _ = _lose_node_1_after_goodbye(tmp_path, wait=12.0, DPBENCH_EXIT_BARRIER_GRACE="0")
    try:
        assert code is None, cluster.nodes[0].output()[-3000:]
    finally:  # torchrun in its barrier takes SIGTERM only after the barrier's C++ wait: SIGKILL it
        root = psutil.Process(cluster.nodes[0].proc.pid)
        for proc in [root] + root.children(recursive=True):
            proc.kill()
        codes, left = finish(cluster, marker, timeout=5)
    assert not left, [p.cmdline() for p in left]
