"""dpbench.cluster without torchrun: the entry point's bad input, the world sizes a cluster
sweeps, the profile's bounds, machine_info["cluster"], and RemotePool driving real workers
through agents that run as threads here (each "node" an agent, a real TCPStore as torchrun's)."""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import socket
import subprocess
import sys
import threading
import time

import _pool_helpers as helpers
import psutil
import pytest
from _torchrun import ROOT

from dpbench.cluster.agent import serve
from dpbench.cluster.head import HeadSession, cluster_facts
from dpbench.cluster.link import AgentLink
from dpbench.cluster.main import main
from dpbench.cluster.node import ClusterError, ClusterInfo, cluster_world_sizes
from dpbench.cluster.remote import RemotePool
from dpbench.launcher import WorkerError, WorkerPool, WorkerTimeoutError, make_pool
from dpbench.measure import resolve_profile
from dpbench.workers.base import Pool, PoolLayout
from dpbench.workers.provider import placement_for

TORCHRUN_ENV = {
    "RANK": "0",
    "WORLD_SIZE": "4",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29500",
    "LOCAL_RANK": "0",
    "LOCAL_WORLD_SIZE": "2",
    "GROUP_RANK": "0",
    "GROUP_WORLD_SIZE": "2",
    "TORCHELASTIC_RUN_ID": "job7",
}


def _info(world=4, per_node=2, nodes=2, **kw) -> ClusterInfo:
    return ClusterInfo(
        rank=0,
        world_size=world,
        local_rank=0,
        local_world_size=per_node,
        node_rank=0,
        nodes=nodes,
        master_addr="127.0.0.1",
        master_port=29500,
        **kw,
    )


def test_outside_torchrun_it_says_how_to_start_in_one_line_and_exits_2():
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_ENV}
    proc = subprocess.run(
        [sys.executable, "-m", "dpbench.cluster", "suites/"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "torchrun --nnodes=N --nproc-per-node=P --rdzv-backend=c10d" in proc.stderr
    assert "-m dpbench.cluster" in proc.stderr and "RANK" in proc.stderr


def test_the_old_module_name_still_runs_the_cluster_runner_and_says_it_is_deprecated():
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_ENV}
    proc = subprocess.run(
        [sys.executable, "-m", "dpbench.launcher.cluster", "suites/"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    first, usage = proc.stderr.strip().splitlines()
    assert first == (
        "dpbench: `-m dpbench.launcher.cluster` is deprecated and will be removed in the next release; "
        "use `-m dpbench.cluster`"
    )
    assert usage.startswith("dpbench.cluster runs under torchrun") and "RANK" in usage


def test_a_bad_join_timeout_is_one_line_and_exit_2(monkeypatch, capsys):
    for name, value in TORCHRUN_ENV.items():
        monkeypatch.setenv(name, value)
    assert main(["--dpbench-join-timeout=soon", "suites/"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--dpbench-join-timeout must be a positive number of seconds, got 'soon'" in err[0]
    assert "rank 0, node 0" in err[0]


def test_cluster_info_reads_what_torchrun_set():
    info = ClusterInfo.from_environ(TORCHRUN_ENV)
    assert (info.rank, info.world_size, info.local_world_size, info.node_rank, info.nodes) == (0, 4, 2, 0, 2)
    assert (info.master_addr, info.master_port, info.run_id, info.use_agent_store) == ("127.0.0.1", 29500, "job7", True)
    with pytest.raises(ClusterError, match="GROUP_RANK, GROUP_WORLD_SIZE unset"):
        ClusterInfo.from_environ({k: v for k, v in TORCHRUN_ENV.items() if not k.startswith("GROUP")})
    with pytest.raises(ClusterError, match="must be integers"):
        ClusterInfo.from_environ({**TORCHRUN_ENV, "WORLD_SIZE": "four"})


@pytest.mark.parametrize(
    "local_max,world,per_node,nodes,expected",
    [
        (4, 2, 1, 2, (1, 2)),
        (4, 4, 2, 2, (1, 2, 4)),
        (4, 16, 8, 2, (1, 2, 3, 4, 8, 16)),  # node 0 up to the profile's bound, then whole nodes
        (8, 32, 8, 4, (1, 2, 3, 4, 5, 6, 7, 8, 16, 24, 32)),
        (2, 2, 2, 1, (1, 2)),
    ],
)
def test_cluster_world_sizes_fill_node_0_then_whole_nodes(local_max, world, per_node, nodes, expected):
    assert cluster_world_sizes(local_max, _info(world, per_node, nodes)) == expected


def test_profile_world_sizes_are_bounded_by_the_torchrun_world():
    profile = resolve_profile(cuda_count=0, cpu_count=2, environ={}, cluster=_info())
    assert profile.world_sizes == (1, 2, 4) and profile.throughput_world_sizes == (4,)
    assert resolve_profile(
        cuda_count=0, cpu_count=2, environ={"DPBENCH_WORLD_SIZES": "2,4"}, cluster=_info()
    ).world_sizes == (2, 4)
    with pytest.raises(ValueError) as err:
        resolve_profile(cuda_count=0, cpu_count=2, environ={"DPBENCH_WORLD_SIZES": "1,8"}, cluster=_info())
    assert str(err.value) == (
        "DPBENCH_WORLD_SIZES='1,8' asks for 8 ranks, but the torchrun world has 4 (WORLD_SIZE: 2 node(s) × 2 per node)"
    )
    # One host, no cluster: as before.
    assert resolve_profile(cuda_count=0, cpu_count=2, environ={"DPBENCH_WORLD_SIZES": "1,8"}).world_sizes == (1, 8)


def _link(rank, node, host, conn=None, **facts):
    return AgentLink(rank=rank, node=node, host=host, pid=100 + rank, conn=conn, facts=facts)


def test_cluster_facts_describe_every_node():
    gpu = {
        "gpus": [{"name": "H100", "uuid": "GPU-1", "memory_bytes": 80}],
        "gpu_count": 1,
        "driver": "550",
        "env": {"NCCL_SOCKET_IFNAME": "eth0"},
        "torch": "2.13.0",
    }
    links = {0: _link(0, 0, "a", **gpu), 1: _link(1, 0, "a"), 2: _link(2, 1, "b", **gpu)}
    facts = cluster_facts(HeadSession(info=_info(world=3), links=links))
    assert facts["nodes"] == 2 and facts["world_size"] == 3 and facts["processes_per_node"] == [2, 1]
    assert [(n["node"], n["hostname"], n["ranks"]) for n in facts["per_node"]] == [(0, "a", [0, 1]), (1, "b", [2])]
    assert facts["per_node"][1]["gpus"][0]["name"] == "H100" and facts["per_node"][1]["env"] == {
        "NCCL_SOCKET_IFNAME": "eth0"
    }
    assert facts["rendezvous_id"] == "none" and cluster_facts() is None  # no session in this process


@pytest.mark.slow
def test_without_a_session_the_launcher_stays_on_this_host():
    from dpbench.strategies import get_strategy

    ddp = get_strategy("ddp")
    defaults = ddp.options_type()
    assert placement_for(ddp, world_size=2, device="cpu", options=defaults) == ddp.placement(
        world_size=2, device="cpu", options=defaults
    )
    with pytest.raises(RuntimeError, match="torchrun .* -m dpbench.cluster"):
        RemotePool(2)
    with make_pool(1, timeout=60.0) as pool:
        assert isinstance(pool, WorkerPool)
        assert pool.layout() == PoolLayout(nodes=1, ranks_per_node=1, hosts=[socket.gethostname()])
        assert pool.layout(world_size=3).ranks_per_node == 3  # an in-process strategy's replicas


# ---------------------------------------------------------------- RemotePool over agent threads
@pytest.fixture
def session(monkeypatch):
    """Two "nodes" of two ranks: four agents serving from threads here, torchrun's store faked by a TCPStore."""
    import torch.distributed as dist

    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    monkeypatch.setenv("DPBENCH_PIN", "0")
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    info = ClusterInfo(
        rank=0,
        world_size=4,
        local_rank=0,
        local_world_size=2,
        node_rank=0,
        nodes=2,
        master_addr="127.0.0.1",
        master_port=store.port,
    )
    links, threads = {}, []
    for rank in range(4):
        head_end, agent_end = mp.Pipe(duplex=True)
        thread = threading.Thread(target=serve, args=(agent_end,), daemon=True)
        thread.start()
        threads.append(thread)
        links[rank] = _link(rank, rank // 2, f"host{rank // 2}", conn=head_end, cuda_device_count=0)
    session = HeadSession(info=info, links=links)
    yield session
    session.close(0)
    for thread in threads:
        thread.join(10)
    assert not any(t.is_alive() for t in threads)
    del store


def _workers() -> list[psutil.Process]:
    """Live children of this process other than Python's forkserver and resource-tracker helpers and
    the launcher's reaper (workers/lifeline.py)."""
    out = []
    for child in psutil.Process().children(recursive=True):
        try:
            cmdline = " ".join(child.cmdline())
            if (
                "forkserver" not in cmdline
                and "resource_tracker" not in cmdline
                and "lifeline.py" not in cmdline
                and child.status() != psutil.STATUS_ZOMBIE
            ):
                out.append(child)
        except psutil.NoSuchProcess:
            pass
    return out


@pytest.mark.slow
def test_remote_pool_runs_on_every_rank_and_knows_the_nodes(session):
    with RemotePool(4, session=session, timeout=30.0) as pool:
        out = pool.run(helpers.describe)
        assert [o["rank"] for o in out] == [0, 1, 2, 3] and {o["sum"] for o in out} == {10.0}
        assert [o["env_rank"] for o in out] == ["0", "1", "2", "3"]  # the pool's rank, not the agent's
        assert (pool.nodes, pool.ranks_per_node, pool.hosts, pool.backend) == (2, 2, ["host0", "host1"], "gloo")
        assert [f["node"] for f in pool.worker_facts] == [0, 0, 1, 1]
        assert sorted(pool.pids) == sorted(o["pid"] for o in out[:2])  # this "node"'s workers only
        assert pool.affinity_plan["mode"] == "off" and pool.affinity_plan["pinned"] is False
        members = {name for name in vars(Pool) if not name.startswith("_")} | {"__enter__", "__exit__"}
        assert {name for name in members if not hasattr(pool, name)} == set()  # a Pool, as WorkerPool is
        with pytest.raises(RuntimeError, match="one multi-process pool at a time"):
            RemotePool(2, session=session)
    assert pool.closed and not _workers()
    with RemotePool(2, session=session, timeout=30.0) as small:  # the first ranks: node 0 only
        assert (small.nodes, small.ranks_per_node, small.hosts) == (1, 2, ["host0"])
        assert [o["sum"] for o in small.run(helpers.describe)] == [3.0, 3.0]
    with pytest.raises(ValueError, match="world_size=5 is more ranks than the torchrun world has"):
        RemotePool(5, session=session)


@pytest.mark.slow  # 5.6 s alone (starts two ranks and the forkserver helper): over the fast tier's 5 s
def test_a_rank_that_raises_is_named_with_its_node(session):
    pool = RemotePool(4, session=session, timeout=30.0)
    with pytest.raises(
        WorkerError, match=r"(?s)worker rank 3 \(node 1, host host1\) failed.*injected failure on rank 3"
    ):
        pool.run(helpers.fail_on, 3)
    assert pool.closed and not _workers()


@pytest.mark.slow  # 5.7 s in the fast tier (2026-12-01): the killed worker, then a fresh pool of agents
def test_a_rank_that_dies_is_reported_at_once_with_its_exit_code(session):
    pool = RemotePool(4, session=session, timeout=60.0)
    started = time.monotonic()
    with pytest.raises(WorkerError) as err:
        pool.run(helpers.die_on, 2)
    assert time.monotonic() - started < 30  # seen by its agent, not by the timeout
    assert str(err.value).startswith("worker rank 2 (node 1, host host1)") and err.value.rank == 2
    assert "died with exit code -9" in err.value.failures[2]
    assert not _workers()
    with RemotePool(4, session=session, timeout=30.0) as fresh:  # the agents serve the next pool
        assert [o["rank"] for o in fresh.run(helpers.describe)] == [0, 1, 2, 3]


@pytest.mark.slow
def test_a_silent_rank_times_out_naming_its_node_and_nothing_is_left(session):
    pool = RemotePool(2, session=session, timeout=2.0)
    started = time.monotonic()
    with pytest.raises(WorkerTimeoutError, match=r"no message from worker rank 1 \(node 0, host host0\) for 2 s"):
        pool.run(helpers.sleep_on, 1, 600)
    assert time.monotonic() - started < 20
    assert not _workers()


@pytest.mark.slow  # 3-5 s on a slow day: past the fast tier's unmarked limit
def test_a_lost_agent_fails_its_rank_now_and_in_later_pools(session):
    session.links[3].conn.close()  # as when the agent's process or node is gone
    session.links[3].mark_lost("its dpbench.cluster agent (pid 103) went away (test)")
    with pytest.raises(WorkerError, match=r"(?s)worker rank 3 \(node 1, host host1\) failed.*went away \(test\)"):
        RemotePool(4, session=session, timeout=30.0)
    assert not _workers()
    with RemotePool(3, session=session, timeout=30.0) as pool:  # ranks 0-2 still serve
        assert len(pool.run(helpers.describe)) == 3


def test_the_head_waits_for_its_agents_a_multiple_of_its_own_start_up(monkeypatch):
    from dpbench.cluster import head as cluster

    assert cluster.head_join_timeout(12.5) == 12.5  # --dpbench-join-timeout wins
    for started, expected in ((2.0, 30.0), (10.0, 40.0), (100.0, 300.0)):
        monkeypatch.setattr(cluster, "_started_seconds_ago", lambda started=started: started)
        assert cluster.head_join_timeout(None) == expected
    monkeypatch.undo()
    assert 30.0 <= cluster.head_join_timeout(None) <= 300.0  # this process: psutil's start time


def test_an_agent_lost_while_the_others_join_is_named_at_once():
    from multiprocessing.connection import Pipe

    from dpbench.cluster.head import _check_joined

    head_end, agent_end = Pipe()
    agent_end.send_bytes(pickle.dumps(("beat", 0.0)))
    link = AgentLink(rank=3, node=1, host="b12", pid=1, conn=Pipe()[0], facts={})
    _check_joined({3: link}, {3: head_end})  # alive: the beat is read, nothing raised
    assert not head_end.poll(0)
    agent_end.close()
    with pytest.raises(
        ClusterError,
        match=r"^node 1 \(host b12, rank 3\) was lost while the agents joined: its "
        r"connection to the head closed \(the process or its node died\)$",
    ):
        _check_joined({3: link}, {3: head_end})
