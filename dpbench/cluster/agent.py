"""The agent side of a cluster run: one per torchrun rank, it starts that rank's fresh workers.

Under ``python -m dpbench.cluster`` every torchrun rank is an *agent*. When a case on the
head (global rank 0) needs ``W`` ranks, the head's :class:`dpbench.cluster.remote.RemotePool`
asks agents 0..W-1 to start one worker each — the very worker of a local pool
(:func:`dpbench.workers.worker.worker_main`, forked from this agent's forkserver, so the
agent never touches CUDA and every pool is fresh processes). The workers form the pool's
process group through a fresh prefix of the store torchrun set up (``MASTER_ADDR`` /
``MASTER_PORT``). The agent relays: calls from the head go down the worker's pipe as bytes,
the worker's messages ("ready", "alive", "result", "error") go back up unchanged, and the
agent watches the worker's process, so a death reaches the head at once with its exit code.

Agent ↔ head messages are ``(tag, pool_id, payload)`` tuples pickled over one
``multiprocessing.connection`` (authenticated) per agent:

* head → agent: ``start`` (a :class:`WorkerOrder`), ``to`` (bytes for the worker),
  ``stop`` (graceful: bool), ``exit`` (the exit status for this agent; pool_id None);
* agent → head: ``started`` ({pid, host, cpus, affinity_mode, affinity_reason}), ``failed`` (traceback: the
  worker could not start),
  ``from`` (the worker's bytes), ``died`` (how the worker ended), ``stopped`` (exit code),
  ``bye`` (acknowledges ``exit``).
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.util
import os
import pickle
import socket
import sys
import time
import traceback
from dataclasses import dataclass, replace
from datetime import timedelta
from functools import partial
from multiprocessing.connection import Connection, wait
from typing import Any

from dpbench.workers.affinity import plan_for_host, resolve_mode
from dpbench.workers.forkserver import PRELOAD as _PRELOAD
from dpbench.workers.forkserver import START_METHOD as _START_METHOD
from dpbench.workers.lifeline import helper_environ, reaper
from dpbench.workers.runtime_env import patched_environ, runtime_env_patch
from dpbench.workers.worker import WorkerConfig, worker_main

__all__ = ["WorkerOrder", "serve", "pool_store"]

# After a polite "close", how long a worker gets to leave its process group (as WorkerPool).
_CLOSE_GRACE_SECONDS = 5.0
_TERMINATE_GRACE_SECONDS = 2.0


@dataclass(kw_only=True, frozen=True)
class WorkerOrder:
    """What the head asks one agent to start: rank ``rank`` of a pool of ``world_size``."""

    pool_id: str
    rank: int
    world_size: int
    device_type: str
    backend: str | None
    timeout: float
    threads: int
    affinity: str
    cores_per_worker: int | None
    local_index: int  # this rank's position among the pool's ranks on this node
    local_count: int  # how many of the pool's ranks run on this node
    store_host: str
    store_port: int
    # The head's import path: the workers unpickle functions of modules the head imported
    # (test files included); the same checkout path on every node is assumed.
    sys_path: tuple[str, ...]
    collective_timeout: float | None = None  # the process group's timeout (None: ``timeout``)


def pool_store(host: str, port: int, prefix: str, timeout: float) -> Any:
    """Worker side: a fresh prefix of torchrun's TCPStore for one pool's process group."""
    import torch.distributed as dist

    base = dist.TCPStore(host, port, is_master=False, timeout=timedelta(seconds=timeout))
    return dist.PrefixStore(prefix, base)


@dataclass
class _Worker:
    pool_id: str
    proc: Any
    pipe: Connection
    stopping: bool = False
    eof: bool = False  # the pipe is closed at the worker's end: only the sentinel is left to watch


def _worker_environ(order: WorkerOrder) -> dict[str, str]:
    env = {**os.environ, **runtime_env_patch(os.environ)}
    # What this worker is in its pool, not what the agent is in the torchrun world: libraries
    # that read these see the process group the worker really belongs to.
    env.update(
        RANK=str(order.rank),
        WORLD_SIZE=str(order.world_size),
        LOCAL_RANK=str(order.local_index),
        LOCAL_WORLD_SIZE=str(order.local_count),
    )
    return env


def _plan(order: WorkerOrder) -> tuple[tuple[int, ...] | None, dict[str, Any]]:
    """This rank's block of this node's cores (the plan a local pool of the node's ranks makes)."""
    mode, off_reason = resolve_mode(order.affinity, os.environ)
    plan = plan_for_host(
        mode=mode,
        device=order.device_type,
        world_size=order.local_count,
        threads_per_worker=order.threads,
        cores_per_worker=order.cores_per_worker,
        off_reason=off_reason,
        environ=os.environ,
    )
    cpus = plan.rank_cores[order.local_index] if plan.rank_cores else None
    return cpus, {
        "cpus": None if cpus is None else list(cpus),
        "affinity_mode": plan.mode,
        "affinity_reason": plan.reason,
    }


def _worker_config(order: WorkerOrder) -> WorkerConfig:
    """How this node starts the worker of one pool rank (its CPU block is added by _start)."""
    prefix = f"dpbench/pool/{order.pool_id}/"
    return WorkerConfig(
        world_size=order.world_size,
        device_type=order.device_type,
        backend=order.backend,
        store_path="",
        timeout=order.timeout,
        collective_timeout=order.collective_timeout,
        threads=order.threads,
        cpus=None,
        environ=_worker_environ(order),
        store_factory=partial(pool_store, order.store_host, order.store_port, prefix, order.timeout),
        loopback=False,  # ranks on other hosts: the user's (or the system's) interface choice stands
        local_rank=order.local_index,  # = LOCAL_RANK in the worker's environment: picks its GPU
    )


def _start(order: WorkerOrder) -> tuple[_Worker, dict[str, Any]]:
    for path in order.sys_path:  # appended: this node's own packages keep precedence
        if path not in sys.path:
            sys.path.append(path)
    # Markers and the reaper before the first worker: should this agent be killed, its
    # workers leave by themselves (workers/lifeline.py), and the reaper makes sure of it.
    reaper().register(mp.util.get_temp_dir())
    ctx = mp.get_context(_START_METHOD)
    if _START_METHOD == "forkserver":
        ctx.set_forkserver_preload(_PRELOAD)
    config = _worker_config(order)
    cpus, plan = _plan(order)
    parent_conn, child_conn = ctx.Pipe(duplex=True)
    with patched_environ({**runtime_env_patch(os.environ), **helper_environ()}):
        proc = ctx.Process(
            target=worker_main,
            args=(order.rank, child_conn, replace(config, cpus=cpus)),
            name=f"dpbench-rank{order.rank}",
            daemon=True,
        )
        proc.start()
    child_conn.close()  # the child's end lives in the child only, so EOF is seen
    return _Worker(pool_id=order.pool_id, proc=proc, pipe=parent_conn), plan


def _stop(worker: _Worker, *, graceful: bool) -> int | None:
    """Stop one worker (politely, then SIGTERM, then SIGKILL); → its exit code."""
    worker.stopping = True
    proc = worker.proc
    if graceful:
        try:
            worker.pipe.send_bytes(pickle.dumps(("close",)))
        except (OSError, ValueError):
            pass
        proc.join(_CLOSE_GRACE_SECONDS)
    if proc.is_alive():
        proc.terminate()
        proc.join(_TERMINATE_GRACE_SECONDS)
    if proc.is_alive():
        proc.kill()
        proc.join()
    worker.pipe.close()
    return proc.exitcode


class _Agent:
    """The relay loop's state: the head connection and this agent's live workers."""

    def __init__(self, conn: Connection):
        self.conn = conn
        self.host = socket.gethostname()
        self.workers: dict[str, _Worker] = {}

    def send(self, tag: str, pool_id: str | None, payload: Any) -> None:
        self.conn.send_bytes(pickle.dumps((tag, pool_id, payload)))

    def on_head(self) -> int | None:
        """Handle one message from the head; → an exit status when the agent must stop."""
        try:
            tag, pool_id, payload = pickle.loads(self.conn.recv_bytes())
        except (EOFError, OSError):
            return 1  # the head went away without saying how the session ended: a failure
        if tag == "start":
            try:
                worker, plan = _start(payload)
            except Exception:
                self.send("failed", pool_id, traceback.format_exc())
            else:
                self.workers[pool_id] = worker
                self.send("started", pool_id, {"pid": worker.proc.pid, "host": self.host, **plan})
        elif tag == "to" and pool_id in self.workers:
            try:
                self.workers[pool_id].pipe.send_bytes(payload)
            except (OSError, ValueError):
                pass  # a dead worker is reported through its sentinel, with its exit code
        elif tag == "stop":
            worker = self.workers.pop(pool_id, None)
            code = _stop(worker, graceful=bool(payload)) if worker is not None else None
            self.send("stopped", pool_id, code)
        elif tag == "exit":
            self.stop_all()
            self.send("bye", None, None)
            return int(payload)
        return None

    def on_worker_message(self, worker: _Worker) -> bool:
        try:
            data = worker.pipe.recv_bytes()
        except (EOFError, OSError):
            worker.eof = True  # the sentinel reports the death with its exit code
            return False
        self.send("from", worker.pool_id, data)
        return True

    def on_worker_exit(self, worker: _Worker) -> None:
        # Its last words (an error with a traceback) go up before the news of its death.
        while not worker.eof and _poll(worker.pipe) and self.on_worker_message(worker):
            pass
        worker.proc.join(0.1)
        self.workers.pop(worker.pool_id, None)
        worker.pipe.close()
        if not worker.stopping:
            self.send(
                "died",
                worker.pool_id,
                f"worker process (pid {worker.proc.pid}) died with exit code {worker.proc.exitcode}",
            )

    def stop_all(self) -> None:
        for worker in list(self.workers.values()):
            _stop(worker, graceful=False)
        self.workers.clear()


def _poll(conn: Connection) -> bool:
    try:
        return conn.poll()
    except (EOFError, OSError):
        return False


def serve(conn: Connection) -> int:
    """Serve the head over ``conn`` until it says ``exit`` (→ that status) or goes away (→ 1).

    Every worker this agent started is stopped on the way out, whatever ends the loop
    (KeyboardInterrupt and SystemExit from a signal handler included).
    """
    agent = _Agent(conn)
    try:
        while True:
            by_pipe = {w.pipe: w for w in agent.workers.values() if not w.eof}
            by_sentinel = {w.proc.sentinel: w for w in agent.workers.values()}
            for ready in wait([conn, *by_pipe, *by_sentinel]):
                if ready is conn:
                    status = agent.on_head()
                    if status is not None:
                        return status
                elif ready in by_pipe:
                    if by_pipe[ready].pool_id in agent.workers:
                        agent.on_worker_message(by_pipe[ready])
                elif by_sentinel[ready].pool_id in agent.workers:
                    agent.on_worker_exit(by_sentinel[ready])
    except (BrokenPipeError, ConnectionError):
        return 1  # the head is gone mid-send
    finally:
        agent.stop_all()


def wait_for_bye(conn: Connection, deadline: float, alive=lambda: True) -> bool:
    """Head side: read ``conn`` until this agent's ``bye`` (True) or EOF / ``deadline`` / ``alive()``
    turning False (the liveness thread found its node lost) (False)."""
    while time.monotonic() < deadline:
        if not alive():
            return False
        try:
            if not conn.poll(min(0.25, max(0.0, deadline - time.monotonic()))):
                continue
            tag, _, _ = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return False
        if tag == "bye":
            return True
    return False
