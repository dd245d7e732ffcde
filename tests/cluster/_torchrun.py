"""Two (or more) torchrun agents on 127.0.0.1 that behave as separate nodes, for the cluster tests.

Each "node" is its own ``python -m torch.distributed.run`` process with a c10d rendezvous on a
free loopback port; they find each other exactly as torchrun agents on different hosts do.
Every process the tests start inherits ``DPBENCH_CLUSTER_MARKER`` so :func:`leftovers` can
find any that outlived its test (psutil reads the environment of every process).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
MARKER_ENV = "DPBENCH_CLUSTER_MARKER"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cluster_env(marker: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "DPBENCH_PROFILE": "quick",
            "DPBENCH_WORKLOADS": "mlp",
            "DPBENCH_TRIALS": "1",
            "DPBENCH_MEMORY_ESTIMATE": "state",  # the held state: instant (the traced peak costs ~2 s a session)
            "GLOO_SOCKET_IFNAME": "lo",
            "PYTHONUNBUFFERED": "1",
            MARKER_ENV: marker,
            # Two "nodes" share this host's cores: pinning each node's ranks would stack them.
            "DPBENCH_PIN": "0",
        }
    )
    env.update(extra)
    return env


@dataclass
class Node:
    proc: subprocess.Popen
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@dataclass
class Cluster:
    """``nodes`` torchrun agents; ``wait()`` → their exit codes; ``stop()`` kills what is left."""

    nodes: list[Node] = field(default_factory=list)

    def wait(self, timeout: float) -> list[int | None]:
        deadline = time.monotonic() + timeout
        for node in self.nodes:
            try:
                node.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        return [node.proc.poll() for node in self.nodes]

    def head(self) -> Node | None:
        """The node whose output carries the head's session summary (rank 0 runs there)."""
        for node in self.nodes:
            if "dpbench.cluster: " in node.output() and "node(s), world" in node.output():
                return node
        return None

    def output(self) -> str:
        return "\n".join(f"===== node {i} =====\n{n.output()}" for i, n in enumerate(self.nodes))

    def stop(self) -> None:
        """SIGTERM what still runs (torchrun then stops its own workers), SIGKILL after a grace."""
        for node in self.nodes:
            if node.proc.poll() is None:
                node.proc.terminate()
        deadline = time.monotonic() + 35  # torchrun gives its workers 30 s after the signal
        for node in self.nodes:
            try:
                node.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                node.proc.kill()
                node.proc.wait(10)


def start(
    tmp_path: Path,
    args: list[str],
    *,
    env: dict[str, str],
    nodes: int = 2,
    nproc: int = 1,
    rdzv_conf: str = "join_timeout=60",
    modules: list[list[str] | None] | None = None,
    only: int | None = None,
    node_env: list[dict[str, str]] | None = None,
) -> Cluster:
    """Start ``nodes`` agents of ``--nnodes={nodes} --nproc-per-node={nproc}`` running
    ``-m dpbench.cluster ARGS`` (``modules[i]`` replaces node i's program and arguments;
    ``only``: start just the first ``only`` of them, the others never join; ``node_env[i]``: more
    environment for node i, e.g. its own TMPDIR, as a separate host has its own disk)."""
    port, run_id = free_port(), uuid.uuid4().hex[:8]
    cluster = Cluster()
    for index in range(nodes if only is None else only):
        program = (
            modules[index]
            if modules and index < len(modules) and modules[index] is not None
            else ["-m", "dpbench.cluster", *args]
        )
        # The first node hosts the rendezvous store, as the head node's agent would.
        conf = f"{rdzv_conf},is_host={1 if index == 0 else 0}"
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nnodes={nodes}",
            f"--nproc-per-node={nproc}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint=127.0.0.1:{port}",
            f"--rdzv-id={run_id}",
            f"--rdzv-conf={conf}",
            "--local-addr=127.0.0.1",
            "--monitor-interval=0.2",
            *program,
        ]
        log = tmp_path / f"node{index}.log"
        with open(log, "w") as out:
            # SIGINT as in a terminal (a background job starts with it ignored).
            mine = {**env, **(node_env[index] if node_env and index < len(node_env) else {})}
            proc = subprocess.Popen(
                cmd,
                cwd=ROOT,
                env=mine,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
            )
        cluster.nodes.append(Node(proc=proc, log=log))
        if index == 0:
            time.sleep(0.5)  # the store host binds first
    return cluster


def leftovers(marker: str, grace: float = 0.0) -> list[psutil.Process]:
    """Processes still alive that carry ``marker`` (waiting up to ``grace`` seconds for them to go)."""
    deadline = time.monotonic() + grace
    while True:
        found = []
        for proc in psutil.process_iter():
            try:
                if proc.environ().get(MARKER_ENV) == marker:
                    found.append(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(0.2)


def kill_all(procs: list[psutil.Process]) -> None:
    for proc in procs:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass


def finish(cluster, marker: str, timeout: float):
    """Wait for every agent (stopping them whatever happens), then kill and return any leftovers."""
    try:
        codes = cluster.wait(timeout)
    finally:
        cluster.stop()
    left = leftovers(marker, grace=15)
    kill_all(left)
    return codes, left
