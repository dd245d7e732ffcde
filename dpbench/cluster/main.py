"""``python -m dpbench.cluster [pytest arguments]``: the suites across several nodes, under torchrun.

On every node: ``torchrun --nnodes=2 --nproc-per-node=8 --rdzv-backend=c10d
--rdzv-endpoint=HEAD:29400 --rdzv-id=JOB -m dpbench.cluster suites/ --benchmark-save=NAME``.

What runs where. Global rank 0 is the *head*: it runs the one pytest session (collection,
trials, saving, all on rank 0's node). Every torchrun rank — rank 0 included, through a
thread of the head — is an *agent* (:mod:`dpbench.cluster.agent`): when a case needs W
ranks, the head's :class:`dpbench.cluster.remote.RemotePool` asks agents 0..W-1 (filling
nodes in order) to start one fresh local worker each; the workers form the case's process
group through a fresh prefix of torchrun's own TCPStore. In-process strategies (single, dp,
manual, torch-dp) run in local workers on the head's node, as on one host.

How the agents find the head: the head listens on a free TCP port and publishes its address
and a random authentication key in torchrun's store (``MASTER_ADDR``/``MASTER_PORT``, which
torchrun points at node 0, where rank 0 runs); each agent connects and says hello with its
node's facts (hostname, GPUs, NCCL_*/GLOO_* settings) — ``machine_info["cluster"]``.

Start-up (:mod:`dpbench.cluster.checkin`): before either imports torch, every agent checks in
with the head on a port both derive from the rendezvous, so a node that dies while its dpbench
still starts (before it could say hello) fails the start within seconds, not at the join deadline.

Liveness (:mod:`dpbench.cluster.liveness`): every agent also keeps a heartbeat connection to
the head. A node that dies, hangs or loses the network is noticed within
``LOST_AFTER_SECONDS`` (6 s) wherever the run is; the head then interrupts its pytest session
(nothing half-measured is saved) and exits 1 with one line naming the node, its host and its
ranks; an agent whose head is lost stops its workers and exits 1 the same way. A node lost
while the session ends (before its goodbye) also makes the head exit 1: torchrun waits in its
exit barrier (300 s) for every node only when its own worker succeeded, so a head exiting 0
next to a dead node would keep node 0's torchrun waiting for it.

Exit status: the head exits with pytest's status and tells every agent to exit with it too,
so a failed session makes every torchrun agent exit non-zero; an agent whose head goes away
exits 1. A node lost *after* its goodbye (the session ended cleanly, its torchrun not yet in the
exit barrier) is noticed by :mod:`dpbench.cluster.exit_watch`, left behind by each node's local
rank 0: it stops its node's torchrun when the barrier still waits 6 s after the session ended, so
no node waits the barrier's 300 s for a dead one. Outside torchrun: one line saying how to start it, status 2.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import socket
import sys
import threading
import time
from multiprocessing.connection import Client
from typing import Any

from dpbench.cluster import checkin as _checkin
from dpbench.cluster.node import (
    DEFAULT_JOIN_TIMEOUT,
    JOIN_OPTION,
    ClusterError,
    ClusterInfo,
    first_line,
    hello_facts,
    leave_now,
    open_store,
    watch_exit_barrier,
)
from dpbench.cluster.parent_watch import ParentWatch

__all__ = ["ORPHAN_GRACE_SECONDS", "Orphan", "main", "run_agent"]


# How long an orphaned rank (its torchrun agent died) gets to stop the polite way — its session
# interrupted, its workers stopped — before it leaves at once (the lifeline and the reaper then
# stop its workers and remove what it staged): its main thread may be inside a C++ wait.
ORPHAN_GRACE_SECONDS = 5.0


class Orphan:
    """What a rank does when :class:`~dpbench.cluster.parent_watch.ParentWatch` finds its torchrun
    agent gone: say so in one line, tell the head why (an agent, once joined), interrupt the work,
    and leave within :data:`ORPHAN_GRACE_SECONDS` whatever the main thread is doing."""

    def __init__(self, where: str, *, grace: float = ORPHAN_GRACE_SECONDS):
        self.where, self.grace = where, grace
        self.pid: int | None = None
        self.tell_head: Any = None  # AgentWatch.say_leaving, once this agent has joined

    @property
    def why(self) -> str:
        return f"torchrun's agent (pid {self.pid}) on that node died; its rank stopped"

    def __call__(self, pid: int) -> None:  # the watch's thread
        self.pid = pid
        print(
            f"dpbench.cluster ({self.where}): torchrun's agent (pid {pid}) died: stopping this rank; nothing was saved",
            file=sys.stderr,
            flush=True,
        )
        if self.tell_head is not None:
            self.tell_head(self.why)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        time.sleep(self.grace)
        leave_now(1)


def run_agent(
    info: ClusterInfo,
    *,
    join_timeout: float | None,
    checkin: _checkin.CheckinClient | None = None,
    orphan: Orphan | None = None,
) -> int:
    from dpbench.cluster.agent import serve

    join_timeout = DEFAULT_JOIN_TIMEOUT if join_timeout is None else join_timeout
    store = open_store(info, join_timeout)
    try:
        head = json.loads(store.get(info.head_key))
    except RuntimeError as exc:  # DistStoreError: a timeout, or the store's host is gone
        raise ClusterError(
            f"the head (rank 0) never published its address in torchrun's store "
            f"({info.master_addr}:{info.master_port}) within {join_timeout:g} s: "
            f"{first_line(exc)}"
        ) from None
    try:
        conn = Client((head["host"], int(head["port"])), authkey=bytes.fromhex(head["authkey"]))
    except OSError as exc:
        raise ClusterError(
            f"cannot connect to the head at {head['host']}:{head['port']} ({exc}); "
            f"set DPBENCH_HEAD_ADDR on node 0 to an address the other nodes reach"
        ) from None
    conn.send_bytes(pickle.dumps(("hello", info.rank, hello_facts(info))))
    from dpbench.cluster.liveness import WATCH_TAG as _TAG
    from dpbench.cluster.liveness import AgentWatch

    try:
        beat = Client((head["host"], int(head["port"])), authkey=bytes.fromhex(head["authkey"]))
    except OSError as exc:
        raise ClusterError(
            f"cannot open the heartbeat connection to the head at {head['host']}:{head['port']} ({exc})"
        ) from None
    beat.send_bytes(pickle.dumps((_TAG, info.rank, None)))
    if checkin is not None:
        checkin.handover()  # joined: the heartbeats below watch the head from here
    # A lost head interrupts serve() (its workers are stopped on the way out), then main() says so.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    watch = AgentWatch(beat, lambda why: signal.pthread_kill(threading.main_thread().ident, signal.SIGINT))
    watch.start()
    if orphan is not None:
        orphan.tell_head = watch.say_leaving
    try:
        status = serve(conn)
    except KeyboardInterrupt:
        if watch.lost is None and (orphan is None or orphan.pid is None):
            raise
        status = 1
    finally:
        if orphan is None or orphan.pid is None:
            watch.stop()
    if orphan is not None and orphan.pid is not None:
        time.sleep(0.3)  # the watch's thread sends why to the head (it looks every 0.25 s); its workers are stopped
        leave_now(1)
    if watch.lost is not None:
        where = f"rank {info.rank}, node {info.node_rank}, host {socket.gethostname()}"
        print(
            f"dpbench.cluster ({where}): lost the head (rank 0): {watch.lost}; this rank's workers were stopped",
            file=sys.stderr,
            flush=True,
        )
        leave_now(1)
    if status == 0:
        watch_exit_barrier(info)
    leave_now(status)  # its workers are stopped (serve's finally); nothing of an agent needs teardown
    return status


def _split_args(argv: list[str]) -> tuple[float | None, list[str]]:
    timeout, rest, items = None, [], iter(argv)
    for arg in items:
        if arg == JOIN_OPTION or arg.startswith(JOIN_OPTION + "="):
            raw = arg.partition("=")[2] if "=" in arg else next(items, "")
            try:
                timeout = float(raw)
            except ValueError:
                timeout = -1.0
            if not timeout > 0:
                raise ClusterError(f"{JOIN_OPTION} must be a positive number of seconds, got {raw!r}")
        else:
            rest.append(arg)
    return timeout, rest


def _interrupt(signum: int, frame: Any) -> None:
    # torchrun stops its workers with SIGTERM (and SIGINT on Ctrl-C): unwind as for Ctrl-C,
    # so the head's session ends and every agent stops its workers.
    raise KeyboardInterrupt(f"signal {signum}")


def _start_checkin(info: ClusterInfo, port: int | None, where: str) -> Any:
    """The head's check-in server or an agent's check-in client (None: turned off, or the head
    could not bind the port — then said in one line, and the start is watched as before)."""
    if port == 0 or info.world_size < 2:
        return None
    port = port or _checkin.checkin_port(info.run_id, info.restart_count, info.master_port)
    key = _checkin.checkin_key(info.run_id, info.restart_count, info.master_port)
    if info.rank == 0:
        try:
            return _checkin.CheckinServer.start_for(port, key)
        except OSError as exc:
            print(
                f"dpbench.cluster ({where}): no start-up check-in (port {port}: {exc.strerror or exc}; "
                f"{_checkin.PORT_ENV} picks another): a node that dies while the run starts is noticed at the "
                f"join deadline",
                file=sys.stderr,
                flush=True,
            )
            return None
    said = {"rank": info.rank, "node": info.node_rank, "host": socket.gethostname(), "pid": os.getpid()}
    client = _checkin.CheckinClient(
        (info.master_addr, port),
        key,
        said,
        lambda line: _checkin.leave(f"dpbench.cluster ({where}): {line}; this rank had started no workers"),
        store=(info.master_addr, info.master_port) if info.use_agent_store else None,
    )
    client.start()
    return client


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        info = ClusterInfo.from_environ(os.environ)
    except ClusterError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    where = f"rank {info.rank}, node {info.node_rank}, host {socket.gethostname()}"
    try:
        join_timeout, pytest_args = _split_args(argv)
    except ClusterError as exc:
        print(f"dpbench.cluster ({where}): {exc}", file=sys.stderr)
        return 2
    try:
        from dpbench.cluster.exit_watch import grace

        grace()  # a bad DPBENCH_EXIT_BARRIER_GRACE is said now, not after the whole session
    except ValueError as exc:
        print(f"dpbench.cluster ({where}): {exc}", file=sys.stderr)
        return 2
    try:
        checkin_port = _checkin.port_setting(os.environ)
    except ValueError as exc:
        print(f"dpbench.cluster ({where}): {exc}", file=sys.stderr)
        return 2
    orphan = Orphan(where)
    ParentWatch(orphan).start()  # before the start-up's waits: an orphan stops wherever it is
    checkin = _start_checkin(info, checkin_port, where)  # before torch is imported: see cluster/checkin.py
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        if info.rank == 0:
            from dpbench.cluster.head import run_head  # the pools' imports: after the check-in started

            status = run_head(info, pytest_args, join_timeout=join_timeout, checkin=checkin)
            return 1 if orphan.pid is not None else status
        return run_agent(info, join_timeout=join_timeout, checkin=checkin, orphan=orphan)
    except ClusterError as exc:
        if orphan.pid is not None:
            leave_now(1)  # its agent's death is the cause, said already
        print(f"dpbench.cluster ({where}): {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        if orphan.pid is not None:
            leave_now(1)
        if isinstance(checkin, _checkin.CheckinClient):
            checkin.settle(1.0)  # a SIGTERM from torchrun because the head died: the loss is what to say
        _checkin.last_word(f"dpbench.cluster ({where}): interrupted")
        return 130
