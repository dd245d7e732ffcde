"""A rank that loses its torchrun agent: the parent watch sees it, the agent's heartbeat says why,
and the head names the cause (the end-to-end run is in test_cluster_faults.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from multiprocessing.connection import Pipe

from dpbench.cluster.link import AgentLink
from dpbench.cluster.liveness import AgentWatch, HeadWatch

_GRANDCHILD = textwrap.dedent("""
    import sys, time
    from dpbench.cluster.parent_watch import ParentWatch
    seen = []
    watch = ParentWatch(seen.append, interval=0.05)
    watch.start()
    print("watching", watch.parent, flush=True)
    deadline = time.monotonic() + 20
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    print("gone", seen, flush=True)
""")


def test_the_parent_watch_fires_once_the_parent_dies(tmp_path):
    """A middle process starts the watching child and is then SIGKILLed, as torchrun's agent is."""
    middle = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", {_GRANDCHILD!r}], stdout=open({str(tmp_path / "out")!r}, "w"))
        print(child.pid, flush=True)
        time.sleep(60)
    """),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    child = int(middle.stdout.readline())
    out = tmp_path / "out"
    deadline = time.monotonic() + 30
    while "watching" not in (out.read_text() if out.exists() else "") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert out.read_text().split() == ["watching", str(middle.pid)]
    assert "gone" not in out.read_text()  # the parent alive: nothing fired
    os.kill(middle.pid, signal.SIGKILL)
    middle.wait(10)
    killed = time.monotonic()
    while "gone" not in out.read_text() and time.monotonic() - killed < 10:
        time.sleep(0.02)
    assert out.read_text().splitlines()[-1] == f"gone [{middle.pid}]"
    assert time.monotonic() - killed < 2
    try:
        os.waitpid(child, os.WNOHANG)
    except ChildProcessError:
        pass


def test_an_agent_that_leaves_on_its_own_is_named_by_the_head_with_its_reason():
    head_end, agent_end = Pipe()
    links = {1: AgentLink(rank=1, node=1, host="b12", pid=1, conn=Pipe()[0], facts={})}
    lost: list[str] = []
    head = HeadWatch(links, {1: head_end}, lost.append)
    agent = AgentWatch(agent_end, lambda why: None)
    head.start()
    agent.start()
    try:
        time.sleep(0.3)
        assert lost == []  # beats both ways: nobody is lost
        agent.say_leaving("torchrun's agent (pid 42) on that node died; its rank stopped")
        deadline = time.monotonic() + 5
        while not lost and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        agent.stop()
        head.stop()
    assert lost == ["node 1 (host b12, rank 1) lost: torchrun's agent (pid 42) on that node died; its rank stopped"]
    assert links[1].alive is False
