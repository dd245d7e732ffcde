"""The suites across two "nodes": two torchrun agents on 127.0.0.1 with a c10d rendezvous, each
its own ``python -m torch.distributed.run`` process, running ``-m dpbench.cluster``.

Saved run (nodes, ranks per node, machine_info.cluster, busbw across nodes) and its report; the
equivalence of ddp / allreduce across nodes with ``single``; and no process left on any node.
"""

from __future__ import annotations

import json
import uuid

import pytest
from _torchrun import cluster_env, finish, start

pytestmark = pytest.mark.slow

SUITE_SELECTION = (
    "test_throughput and mlp and (single or ddp)"
    " or test_collective and all_reduce and 4KiB and not 64KiB and not bucket"
)


def test_suites_run_across_two_nodes_and_save_once_on_the_head(tmp_path):
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
            SUITE_SELECTION,
            f"--benchmark-storage=file://{storage}",
            "--benchmark-save=two-nodes",
        ],
        env=cluster_env(marker),
    )
    codes, left = finish(cluster, marker, timeout=180)
    out = cluster.output()
    assert codes == [0, 0], out[-6000:]
    assert not left, [p.cmdline() for p in left]
    saved = list(storage.glob("*/0001_two-nodes.json"))
    assert len(saved) == 1, list(storage.rglob("*"))  # once, by the head
    run = json.loads(saved[0].read_text())
    cluster_info = run["machine_info"]["cluster"]
    assert cluster_info["nodes"] == 2 and cluster_info["world_size"] == 2 and cluster_info["processes_per_node"] == 1
    assert [n["node"] for n in cluster_info["per_node"]] == [0, 1]
    assert all(
        n["hostname"] and "gpus" in n and n["env"].get("GLOO_SOCKET_IFNAME") == "lo" for n in cluster_info["per_node"]
    )
    by_name = {b["name"]: b["extra_info"] for b in run["benchmarks"]}
    ddp = by_name["test_throughput[ddp-mlp-w2]"]
    assert (ddp["nodes"], ddp["ranks_per_node"], ddp["world_size"]) == (2, 1, 2)
    # Each node's agent forks its ranks from its own helper, kept for the session (not restarted per pass).
    assert (
        ddp["harness_settings"]["worker_start"]
        == run["machine_info"]["dpbench"]["worker_start"]
        == ("forkserver, one helper per session")
    )
    assert [w["node"] for w in ddp["workers"]] == [0, 1]
    single = by_name["test_throughput[single-mlp-w1]"]
    assert (single["nodes"], single["ranks_per_node"]) == (1, 1)  # in-process: on the head's node
    (comm,) = [i for i in by_name.values() if i["kind"] == "collective"]
    assert (comm["nodes"], comm["ranks_per_node"], comm["world_size"]) == (2, 1, 2)
    # nccl-tests' all_reduce busbw = algbw × 2(n-1)/n, from the time measured across the nodes.
    assert comm["busbw_gbps"] == pytest.approx(comm["size_bytes"] / comm["time_s"] / 1e9 * 2 * (2 - 1) / 2)
    html = tmp_path / "report.html"
    from dpbench.cli import main  # in this process: a fresh interpreter would only import again (~2 s)

    assert main(["report", str(saved[0]), "-o", str(html)]) == 0
    assert "ddp" in html.read_text()


def test_four_ranks_on_two_nodes_train_like_single(tmp_path):
    """ddp and allreduce over 2 nodes × 2 ranks, through dpbench.launch: parameters equal single's."""
    marker = uuid.uuid4().hex
    cluster = start(
        tmp_path, ["tests/cluster/cluster_checks.py", "-q", "-p", "no:cacheprovider"], env=cluster_env(marker), nproc=2
    )
    codes, left = finish(cluster, marker, timeout=180)
    out = cluster.output()
    assert codes == [0, 0], out[-6000:]
    assert "3 passed" in out, out[-6000:]
    assert "world 4" in out and "node 1 (" in out  # the head says where the ranks are
    assert not left, [p.cmdline() for p in left]
