"""Two torchrun "nodes" on 127.0.0.1, one of them killed whole while its dpbench starts (the
slow-start stand-in, ``_slow_start.py``): the other node leaves within seconds, naming the lost one,
and no process is left. Their 10 s bounds need no machine of their own: with both cores busy (two
busy loops) the head left 2.1-2.3 s after the kill and the agent 0.9-1.1 s (3 runs each)."""

from __future__ import annotations

import re
import time
import uuid

import pytest
from _torchrun import cluster_env, kill_all, leftovers, start

pytestmark = pytest.mark.slow


SLOW_START = "tests/cluster/_slow_start.py"  # torchrun runs it from the checkout's root


def _wait_for(node, text: str, seconds: float = 90.0) -> None:
    deadline = time.monotonic() + seconds
    while text not in node.output():
        assert node.proc.poll() is None and time.monotonic() < deadline, node.output()[-4000:]
        time.sleep(0.05)


def _kill_tree(node) -> float:
    """SIGKILL a node's torchrun and everything under it, as a node's death would; → when."""
    import psutil

    root = psutil.Process(node.proc.pid)
    tree = [root] + root.children(recursive=True)
    killed = time.monotonic()
    kill_all(tree)
    return killed


def _kill_while_starting(tmp_path, victim: int, ready: str) -> tuple[int, float, str, list]:
    """Node ``victim`` runs the slow-start stand-in; once its output says ``ready``, kill it whole.
    → the other node's exit status, seconds from the kill, its output, and leftovers (killed)."""
    marker = uuid.uuid4().hex
    modules = [None, None]
    modules[victim] = [SLOW_START]
    cluster = start(tmp_path, ["suites/", "-q"], env=cluster_env(marker), modules=modules)
    other = cluster.nodes[1 - victim]
    try:
        _wait_for(cluster.nodes[victim], ready)
        killed = _kill_tree(cluster.nodes[victim])
        code = other.proc.wait(60)
        took = time.monotonic() - killed
    finally:
        cluster.stop()
    left = leftovers(marker, grace=15)
    kill_all(left)
    return code, took, other.output(), left


def _one_line(out: str, prefix: str) -> str:
    lines = [line for line in out.splitlines() if line.startswith(prefix)]
    assert len(lines) == 1, out[-4000:]
    return lines[0]


def test_a_node_killed_while_its_dpbench_starts_fails_the_head_within_seconds(tmp_path):
    """Before this check-in the head noticed such a node only at its join deadline (≥ 30 s)."""
    code, took, out, left = _kill_while_starting(tmp_path, victim=1, ready="slow start: checked in")
    print(f"the head exited {took:.2f} s after the kill")
    assert code != 0 and took < 10, (code, took, out[-4000:])
    assert re.fullmatch(
        r"dpbench\.cluster \(rank 0, node 0, host [^)]+\): node 1 \(host [^,]+, rank 1\) was lost while "
        r"it started: its check-in link closed \(the process or its node died\)",
        _one_line(out, "dpbench.cluster (rank 0"),
    ), out[-4000:]
    assert not left, [p.cmdline() for p in left]


def test_the_head_node_killed_while_an_agent_starts_makes_that_agent_leave_within_seconds(tmp_path):
    code, took, out, left = _kill_while_starting(tmp_path, victim=0, ready="slow start: rank 1 checked in")
    print(f"the agent exited {took:.2f} s after the kill")
    assert code != 0 and took < 10, (code, took, out[-4000:])
    assert re.fullmatch(
        r"dpbench\.cluster \(rank 1, node 1, host [^)]+\): lost the head \(rank 0\) while starting: its "
        r"check-in link closed \(the process or its node died\); this rank had started no workers",
        _one_line(out, "dpbench.cluster (rank 1"),
    ), out[-4000:]
    assert not left, [p.cmdline() for p in left]
