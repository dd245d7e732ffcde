"""Faults across two torchrun "nodes" on 127.0.0.1: a node that never joins, a rank killed in the
middle of a case (its worker, or its dpbench.cluster agent), Ctrl-C on the head node, and world
sizes the torchrun world cannot hold. In every case every agent exits non-zero, nothing hangs,
and no process is left on any node (psutil, by an environment marker)."""

from __future__ import annotations

import json
import re
import signal
import textwrap
import time
import uuid

import pytest
from _torchrun import cluster_env, finish, kill_all, leftovers, start

pytestmark = pytest.mark.slow


def test_a_node_that_never_joins_fails_the_rendezvous_with_torchrun_error(tmp_path):
    marker = uuid.uuid4().hex
    started = time.monotonic()
    cluster = start(
        tmp_path, ["suites/", "-q"], env=cluster_env(marker), only=1, rdzv_conf="join_timeout=4,last_call_timeout=1"
    )
    codes, left = finish(cluster, marker, timeout=120)
    out = cluster.output()
    assert codes[0] not in (0, None), out[-4000:]
    assert "RendezvousTimeoutError" in out, out[-4000:]  # torchrun's own error
    assert time.monotonic() - started < 100
    assert not left, [p.cmdline() for p in left]


def test_a_node_whose_dpbench_never_connects_fails_the_head_in_one_line(tmp_path):
    marker = uuid.uuid4().hex
    # Node 1 joins torchrun's rendezvous but runs something else: the head gives up on it.
    cluster = start(
        tmp_path,
        ["suites/", "-q", "--dpbench-join-timeout=5"],
        env=cluster_env(marker),
        modules=[None, ["--no-python", "sleep", "120"]],
    )
    try:
        codes = [cluster.nodes[0].proc.wait(120), None]
    finally:
        cluster.stop()
    out = cluster.nodes[0].output()
    assert codes[0] != 0, out[-4000:]
    lines = [line for line in out.splitlines() if line.startswith("dpbench.cluster (rank 0")]
    assert len(lines) == 1 and "rank(s) 1 never connected to the head" in lines[0], out[-4000:]
    assert "within 5 s" in lines[0]
    left = leftovers(marker, grace=15)
    kill_all(left)
    assert not left, [p.cmdline() for p in left]


def test_world_sizes_beyond_the_torchrun_world_are_a_usage_error_before_any_case(tmp_path):
    marker = uuid.uuid4().hex
    cluster = start(
        tmp_path,
        ["suites/test_throughput.py", "-q"],
        nodes=1,
        nproc=2,
        env=cluster_env(marker, DPBENCH_WORLD_SIZES="1,8"),
    )
    codes, left = finish(cluster, marker, timeout=120)
    out = cluster.output()
    assert codes[0] != 0, out[-4000:]
    assert "DPBENCH_WORLD_SIZES='1,8' asks for 8 ranks, but the torchrun world has 2" in out, out[-4000:]
    assert "exitcode  : 4" in out  # pytest's usage error, on the head and passed on to the agent
    assert "trial 1/" not in out  # no case ran
    assert not left, [p.cmdline() for p in left]


_KILL_SUITE = """
import os
import signal

import psutil
import pytest
import torch.distributed as dist
from torch import nn

import dpbench
from dpbench.measure import TrainingCase, measure_training

VICTIM = "{victim}"  # "worker": rank 1's worker kills itself; "agent": it kills its dpbench.cluster agent


class KillOnRank1(nn.Sequential):
    def forward(self, x):
        self.calls = getattr(self, "calls", 0) + 1
        if dist.is_initialized() and dist.get_rank() == 1 and self.calls == 3:  # mid-case, mid-step
            me = psutil.Process()
            target = me if VICTIM == "worker" else me.parent().parent()  # worker → forkserver → agent
            os.kill(target.pid, signal.SIGKILL)
        return super().forward(x)


def killer_model():
    return KillOnRank1(nn.Flatten(), nn.Linear(784, 10))


KILLER = dpbench.Workload(name="killer", model=killer_model, batch=dpbench.get_workload("mlp").batch)
CASES = [TrainingCase(strategy="ddp", workload="mlp", world_size=2, global_batch=8),
         TrainingCase(strategy="ddp", workload=KILLER, world_size=2, global_batch=8),
         TrainingCase(strategy="ddp", workload="mlp", world_size=2, global_batch=16),
         TrainingCase(strategy="single", workload="mlp", world_size=1, global_batch=8)]


@pytest.mark.parametrize("case", CASES, ids=["before", "killed", "after", "single"])
def test_case(benchmark, case, profile, trials):
    info, _ = measure_training(benchmark, case, session=trials, profile=profile, suite="fault")
    assert info["samples_per_s"] > 0
"""


@pytest.mark.parametrize("victim", ["worker", "agent"])
def test_a_rank_killed_mid_case_fails_that_case_naming_rank_and_node(tmp_path, victim):
    marker = uuid.uuid4().hex
    suite = tmp_path / "suite_kill"
    suite.mkdir()
    (suite / "test_kill.py").write_text(textwrap.dedent(_KILL_SUITE.format(victim=victim)))
    storage = tmp_path / "results"
    started = time.monotonic()
    cluster = start(
        tmp_path,
        [
            str(suite),
            "-q",
            "--dpbench",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:hypothesispytest",
            f"--benchmark-storage=file://{storage}",
            "--benchmark-save=killed",
        ],
        env=cluster_env(marker),
    )
    codes, left = finish(cluster, marker, timeout=150)
    out = cluster.output()
    assert all(code not in (0, None) for code in codes), (codes, out[-6000:])  # every agent exits non-zero
    assert "no message from worker" not in out  # found dead at once, not after the case's timeout
    assert time.monotonic() - started < 150
    if victim == "worker":
        assert re.search(r"worker rank 1 \(node 1, host [^)]+\)", out), out[-6000:]
        assert "died with exit code -9" in out and "1 failed, 3 passed" in out, out[-6000:]
        (saved,) = storage.glob("*/0001_killed.json")
        names = {b["name"] for b in json.loads(saved.read_text())["benchmarks"]}
        assert {"test_case[before]", "test_case[single]"} <= names and "test_case[killed]" not in names
    else:
        # The node's agent is gone (its heartbeat connection closed): the run stops, saving nothing,
        # with one line naming the node, its host and its ranks.
        assert re.search(r"the run was stopped: node 1 \(host [^,]+, rank 1\) lost: its connection closed", out), out[
            -6000:
        ]
        assert "interrupted: nothing was saved" in out and not list(storage.rglob("*.json")), out[-6000:]
    assert not left, [p.cmdline() for p in left]


@pytest.mark.parametrize(
    "sig, why",
    [
        (signal.SIGINT, "interrupted"),
        # What a closed terminal sends: torchrun passes it on to its ranks, as it does a CI runner's
        # SIGTERM, which the ranks meet alike (dpbench._children.stop_signals).
        (signal.SIGHUP, "terminated (SIGHUP)"),
    ],
    ids=["sigint", "sighup"],
)
def test_a_signal_to_the_head_nodes_torchrun_stops_every_node(tmp_path, sig, why):
    marker = uuid.uuid4().hex
    storage = tmp_path / "results"
    cluster = start(
        tmp_path,
        [
            "suites/",
            "-q",
            "-p",
            "no:cacheprovider",
            "-k",
            "test_throughput and mlp and ddp",
            f"--benchmark-storage=file://{storage}",
            "--benchmark-save=interrupted",
        ],
        env=cluster_env(marker, DPBENCH_TRIALS="3"),
    )
    try:
        deadline = time.monotonic() + 120
        head = None
        while time.monotonic() < deadline:
            head = cluster.head()
            if head is not None and "trial 2/3" in head.output():
                break
            assert all(n.proc.poll() is None for n in cluster.nodes), cluster.output()[-4000:]
            time.sleep(0.2)
        assert head is not None and "trial 2/3" in head.output(), cluster.output()[-4000:]
        head.proc.send_signal(sig)  # Ctrl-C (or a cancel) reaches the head node's torchrun agent
        codes = cluster.wait(60)
    finally:
        cluster.stop()
    out = cluster.output()
    assert all(code not in (0, None) for code in codes), (codes, out[-6000:])
    assert f"{why}: nothing was saved" in out, out[-6000:]
    assert not list(storage.rglob("*.json"))
    left = leftovers(marker, grace=15)
    kill_all(left)
    assert not left, [p.cmdline() for p in left]


def test_a_node_whose_torchrun_agent_dies_alone_stops_the_run_in_seconds(tmp_path):
    """SIGKILL of node 1's torchrun only (an OOM kill of the agent): its rank, now an orphan, stops
    and says why; the head names node 1 and the agent's death and exits non-zero within 10 s; every
    process of node 1 is gone within 10 s; nothing is saved."""
    import psutil

    marker = uuid.uuid4().hex
    storage = tmp_path / "results"
    cluster = start(
        tmp_path,
        [
            "suites/test_throughput.py",
            "-q",
            "-p",
            "no:cacheprovider",
            "-k",
            "ddp and mlp",
            f"--benchmark-storage=file://{storage}",
            "--benchmark-save=orphan",
        ],
        env=cluster_env(marker, DPBENCH_TRIALS="5"),
    )
    try:
        deadline = time.monotonic() + 120
        while "trial 1/" not in cluster.nodes[0].output() and time.monotonic() < deadline:
            assert all(n.proc.poll() is None for n in cluster.nodes), cluster.output()[-4000:]
            time.sleep(0.1)
        assert "trial 1/" in cluster.nodes[0].output(), cluster.output()[-4000:]
        agent = psutil.Process(cluster.nodes[1].proc.pid)
        node1 = agent.children(recursive=True)
        assert node1, "node 1's torchrun has no rank"
        agent.kill()  # torchrun alone: its ranks live on as orphans unless they watch it
        killed = time.monotonic()
        code = cluster.nodes[0].proc.wait(30)
        took = time.monotonic() - killed
        gone, alive = psutil.wait_procs(node1, timeout=max(0.1, 10 - (time.monotonic() - killed)))
    finally:
        codes, left = finish(cluster, marker, timeout=30)
    out = cluster.output()
    assert code not in (0, None) and took <= 10, (code, took, out[-6000:])
    assert not alive, [p.pid for p in alive]
    assert re.search(r"node 1 \(host [^,]+, rank 1\) lost: torchrun's agent \(pid \d+\) on that node died", out), out[
        -6000:
    ]
    assert re.search(
        r"rank 1, node 1, host [^)]+\): torchrun's agent \(pid \d+\) died: stopping this rank; "
        r"nothing was saved",
        out,
    ), out[-6000:]
    assert "TCPStore" not in out and "connectFullMesh" not in out, out[-6000:]  # not a store's timeout
    assert not list(storage.rglob("*.json"))  # nothing half-measured was saved
    assert not left, [p.cmdline() for p in left]
