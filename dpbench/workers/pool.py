"""WorkerPool: spawned worker processes with torch.distributed set up, driven from the parent.

The parent sends each rank a picklable function; every rank runs it and sends back its
result. Messages cross a ``multiprocessing`` pipe as standard-pickle bytes (tensors are
copied, never shared through file descriptors, so a dying worker cannot leave the parent
holding a dangling shared-memory handle).

Failure handling, all on the parent side:

* a rank that raises → :class:`WorkerError` naming the rank, with the worker's traceback;
* a rank that dies (segfault, SIGKILL, ``os._exit``) → :class:`WorkerError` with its exit code;
* no word from a rank for ``timeout`` seconds → :class:`WorkerTimeoutError`;
* ``KeyboardInterrupt`` (or any exception) while waiting → the workers are stopped, then it
  propagates.

After any of these the pool is closed: collective state is unknown once a rank failed, so
the only safe continuation is a fresh pool. ``close()`` asks politely, then terminates,
then kills; it is idempotent.

Whatever kills the parent (SIGINT, SIGTERM, SIGKILL, a crash), nothing it started outlives it,
through what the OS gives rather than this module's ``finally`` blocks (see
:mod:`dpbench.workers.lifeline`): every worker watches a pipe whose write end only the parent
holds and leaves (removing its rendezvous directory) at its EOF; every forkserver child dies
with the helper through ``PR_SET_PDEATHSIG`` (so a killed helper makes its workers' deaths
real, not just reported); the helper leaves once the parent and its workers are gone; and a
reaper process in its own session removes the rendezvous directory and SIGKILLs whatever still
carries this process's marker. Every worker, and the helper, carries ``DPBENCH_RUN_ID`` and
``DPBENCH_LIFELINE`` in its environment.
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.util as mp_util
import os
import pickle
import shutil
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from multiprocessing.connection import Connection
from typing import Any

from dpbench.workers.affinity import ParentAffinity, plan_for_host, resolve_mode
from dpbench.workers.base import (
    MIN_START_SECONDS,
    PoolLayout,
    WorkerError,
    WorkerTimeoutError,
    available_cores,
    check_collective_timeout,
    default_threads,
    pick_backend,
    require_cuda,
)
from dpbench.workers.collect import Heard, Hearing, RankNames, collect_ranks, failure_error
from dpbench.workers.forkserver import (
    PRELOAD as _PRELOAD,
)
from dpbench.workers.forkserver import (
    START_METHOD as _START_METHOD,
)
from dpbench.workers.forkserver import (
    helper_alive as _helper_alive,
)
from dpbench.workers.forkserver import (
    track_pool,
)
from dpbench.workers.lifeline import helper_environ, reaper
from dpbench.workers.runtime_env import patched_environ, runtime_env_patch
from dpbench.workers.starting import check_socket_dir, start_process
from dpbench.workers.worker import WorkerConfig, WorkerContext, worker_main

# After a worker died with its forkserver helper, how long to wait for the helper's other workers
# (the wait ends as soon as every rank is heard). Not longer: a rank the helper never started is
# never heard, and a signal that stops a case while its workers start must end it within 5 s.
HELPER_GONE_GRACE_SECONDS = 2.0
# After a polite "close", how long a worker gets to tear down its process group and exit.
_CLOSE_GRACE_SECONDS = 5.0

__all__ = [
    "WorkerPool",
    "WorkerContext",
    "WorkerError",
    "WorkerTimeoutError",
    "available_cores",
    "default_threads",
]


def _helper_gone(within: float = 1.0) -> bool:
    """Has the forkserver helper died? Its pipes close while it exits, before the kernel lets
    ``waitid`` see it dead, so a worker's status (read through that pipe: 255 at EOF) can arrive
    first: wait up to ``within`` s for the death to show (under load a killed helper can still read as
    alive: docs/calibration.md#forkserver-helper-death). Asked only after a worker's exit code 255."""
    deadline = time.monotonic() + within
    while _helper_alive():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


class WorkerPool:
    """``world_size`` spawned worker processes that run functions on every rank.

    ``device``: "cpu" or "cuda" (rank r uses ``cuda:r % device_count``). ``backend``: the
    torch.distributed backend; None picks "gloo" on CPU, "nccl" on CUDA when every rank
    has its own GPU, else "gloo". ``process_group=False`` starts workers without
    torch.distributed (``ctx.group`` is None). ``timeout``: seconds a rank may stay silent
    during a call (and the collective timeout inside workers). ``collective_timeout``: the
    process group's timeout instead, where one collective may wait longer than a rank stays
    silent (ranks compiling at different speeds; the waiting rank beats through
    ``ctx.keep_alive``). ``threads_per_worker``: the ``torch.set_num_threads`` of every worker;
    None → cores // world_size (at least 1).

    ``affinity``: "auto" (default) pins each rank to its own block of cores where the OS
    allows and there are enough cores — whole physical cores, no hyperthread of another rank's,
    and on CUDA cores of its GPU's NUMA node — and moves the parent's threads (and so a resource
    sampler started afterwards) onto the cores left over, until the pool closes; "off"
    leaves scheduling to the OS. ``DPBENCH_PIN=0`` in the environment forces "off".
    ``cores_per_worker``: the size of each rank's block (None: an equal share of the
    cores); see :func:`dpbench.workers.affinity.plan_affinity`. The decision is in
    ``affinity_plan`` and what each worker really runs with in ``worker_facts``. OpenMP and
    MKL run with the user's own environment, nothing added (see ``workers/runtime_env.py``).
    The parent waits for results blocked in ``multiprocessing.connection.wait`` (no polling),
    and workers send heartbeats at most once a second, so the parent stays asleep while steps run.
    """

    def __init__(
        self,
        world_size: int,
        *,
        device: str = "cpu",
        backend: str | None = None,
        timeout: float = 60.0,
        threads_per_worker: int | None = None,
        process_group: bool = True,
        affinity: str = "auto",
        cores_per_worker: int | None = None,
        collective_timeout: float | None = None,
    ):
        if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"world_size must be an int >= 1, got {world_size!r}")
        if device not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
        if not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        check_collective_timeout(collective_timeout)
        if threads_per_worker is not None and (not isinstance(threads_per_worker, int) or threads_per_worker < 1):
            raise ValueError(f"threads_per_worker must be None or an int >= 1, got {threads_per_worker!r}")
        if cores_per_worker is not None and (
            isinstance(cores_per_worker, bool) or not isinstance(cores_per_worker, int) or cores_per_worker < 1
        ):
            raise ValueError(f"cores_per_worker must be None or an int >= 1, got {cores_per_worker!r}")
        mode, off_reason = resolve_mode(affinity, os.environ)
        if device == "cuda":
            require_cuda()
        self.world_size = world_size
        self.device = device
        self.backend = pick_backend(device, world_size, backend) if process_group else None
        self.timeout = float(timeout)
        self.collective_timeout = None if collective_timeout is None else float(collective_timeout)
        self.threads_per_worker = threads_per_worker if threads_per_worker is not None else default_threads(world_size)
        plan = plan_for_host(
            mode=mode,
            device=device,
            world_size=world_size,
            threads_per_worker=self.threads_per_worker,
            cores_per_worker=cores_per_worker,
            off_reason=off_reason,
            environ=os.environ,
        )
        self._plan = plan
        self._parent = ParentAffinity()
        self._parent_note: str | None = None
        self._facts: list[dict[str, Any]] = []
        self._procs: list[Any] = []
        self._conns: list[Connection] = []
        self._tmpdir: str | None = None
        self._closed = False
        self._names = RankNames(
            label=lambda rank: f"rank {rank}",
            group=lambda ranks: "rank " + ", ".join(str(r) for r in ranks),
            world=f"world_size={world_size}",
            stopped="the workers were stopped",
        )
        self._start()

    # -- lifecycle -----------------------------------------------------------------
    def _start(self) -> None:
        track_pool(self)  # fresh_forkserver refuses while any is open: its workers die with the helper
        ctx = mp.get_context(_START_METHOD)
        if _START_METHOD == "forkserver":
            # Only takes effect when the helper starts (first pool of this process).
            ctx.set_forkserver_preload(_PRELOAD)
        # Before the first process starts: the forkserver helper and every worker inherit the
        # markers, and the reaper removes the rendezvous dir should this process die first.
        lifeline = reaper()
        # multiprocessing's own temp dir (the forkserver's socket): removed at a clean exit only.
        mp_tmp = mp_util.get_temp_dir()
        lifeline.register(mp_tmp)
        if _START_METHOD == "forkserver":
            check_socket_dir(mp_tmp)
        # The FileStore lives in a private temp dir: no TCP port for rendezvous at all.
        self._tmpdir = tempfile.mkdtemp(prefix="dpbench-rdzv-")
        lifeline.register(self._tmpdir)
        runtime_patch = runtime_env_patch(os.environ)
        config = WorkerConfig(
            world_size=self.world_size,
            device_type=self.device,
            backend=self.backend,
            store_path=os.path.join(self._tmpdir, "store"),
            timeout=self.timeout,
            collective_timeout=self.collective_timeout,
            threads=self.threads_per_worker,
            cpus=None,
            environ={**os.environ, **runtime_patch},
        )
        try:
            # The forkserver helper (started by the first worker of the process) inherits
            # this environment; see workers/runtime_env.py for why it must be there.
            with patched_environ({**runtime_patch, **helper_environ()}):
                self._spawn(ctx, config)
            # Only once the processes exist: the forkserver helper starts with the first
            # pool's first worker and lives on; started on the spare cores, it would hand
            # them to every later unpinned worker.
            self._move_parent()
            self._facts = self._collect("ready", timeout=max(self.timeout, MIN_START_SECONDS))
        except BaseException:
            self._shutdown(graceful=False)
            raise

    def _spawn(self, ctx: Any, config: WorkerConfig) -> None:
        rank_cores = self._plan.rank_cores
        for rank in range(self.world_size):
            parent_conn, child_conn = ctx.Pipe(duplex=True)
            proc = ctx.Process(
                target=worker_main,
                args=(rank, child_conn, replace(config, cpus=rank_cores[rank] if rank_cores else None)),
                name=f"dpbench-rank{rank}",
                daemon=True,  # dies with the parent even if close() is never reached
            )
            start_process(proc, rank)
            child_conn.close()  # the child's end lives in the child only, so EOF is seen
            self._procs.append(proc)
            self._conns.append(parent_conn)

    def close(self) -> None:
        """Stop every worker (politely, then SIGTERM, then SIGKILL); idempotent."""
        self._shutdown(graceful=True)

    def _shutdown(self, *, graceful: bool) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if graceful:
                for conn in self._conns:
                    try:
                        conn.send_bytes(pickle.dumps(("close",)))
                    except (OSError, ValueError):  # worker already gone / pipe broken
                        pass
                deadline = time.monotonic() + _CLOSE_GRACE_SECONDS
                for proc in self._procs:
                    proc.join(max(0.0, deadline - time.monotonic()))
        finally:
            # Also when Ctrl-C lands during the polite wait: the workers, the parent's cores and
            # the rendezvous directory are cleaned up all the same (close() is not called twice).
            self._force_stop()

    def _force_stop(self) -> None:
        for proc in self._procs:
            if proc.is_alive():
                proc.terminate()
        for proc in self._procs:
            proc.join(2.0)
            if proc.is_alive():
                proc.kill()
                proc.join()
        for conn in self._conns:
            conn.close()
        self._parent.restore()
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            reaper().release(self._tmpdir)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __del__(self) -> None:  # last resort; close() is the real API
        try:
            self.close()
        except Exception:
            pass

    @property
    def pids(self) -> list[int]:
        return [proc.pid for proc in self._procs]

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def affinity_plan(self) -> dict[str, Any]:
        """The pinning decision (JSON-safe): ``mode`` ("auto"/"off"), ``pinned``, ``reason``,
        ``available_cores``, ``rank_cores`` (list per rank, or None), ``parent_cores`` (the
        cores the parent was moved to, or None when it was left alone) and ``parent_note``
        (None, or why the planned move did not happen)."""
        out = self._plan.to_dict()
        out["parent_note"] = self._parent_note
        return out

    def layout(self, *, world_size: int | None = None) -> PoolLayout:
        """One node holds every rank (``world_size``: an in-process strategy's replicas, when it
        runs more than the pool's processes)."""
        return PoolLayout(nodes=1, ranks_per_node=world_size or self.world_size, hosts=[socket.gethostname()])

    def on_head_node(self, rank: int) -> bool:
        """Every rank runs on this host (where a resource sampler can watch it)."""
        return True

    def host_of(self, rank: int) -> str:
        """The hostname rank ``rank`` runs on: this host's."""
        return socket.gethostname()

    @property
    def worker_facts(self) -> list[dict[str, Any]]:
        """Per rank, what the worker reported when it started (JSON-safe; the keys are
        documented in :func:`dpbench.workers.worker.worker_facts`)."""
        return [dict(f, env=dict(f["env"]), runtime_env=dict(f["runtime_env"])) for f in self._facts]

    def _move_parent(self) -> None:
        cores = self._plan.parent_cores
        if cores is None:
            return
        if not self._parent.move(cores):
            self._parent_note = "not moved: another open WorkerPool already holds the parent off its workers' cores"

    # -- calls ---------------------------------------------------------------------
    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> list[Any]:
        """Run ``fn(ctx, *args, **kwargs)`` on every rank; return the results by rank."""
        if self._closed:
            raise RuntimeError("this WorkerPool is closed (after close() or a worker failure); start a new one")
        try:
            payload = pickle.dumps(("call", fn, args, kwargs))
        except Exception as exc:
            raise TypeError(
                f"fn and its arguments must be picklable to reach the workers "
                f"({type(exc).__name__}: {exc}); use module-level functions"
            ) from exc
        try:
            for conn in self._conns:
                try:
                    conn.send_bytes(payload)
                except (OSError, ValueError):
                    pass  # a dead rank is reported by _collect through its exit code
            return self._collect("result", timeout=self.timeout)
        except BaseException:
            # Includes KeyboardInterrupt: never leave workers behind. After a failure some
            # ranks may be stuck in a collective, so waiting for a polite exit is pointless.
            self._shutdown(graceful=False)
            raise

    def _collect(self, kind: str, *, timeout: float) -> list[Any]:
        """Wait until every rank sent ``kind``; raise on errors, deaths and silence."""
        waitables: dict[Any, int] = {conn: rank for rank, conn in enumerate(self._conns)}
        # After the pipes: a rank whose pipe says it failed needs no word from its sentinel.
        waitables.update({proc.sentinel: rank for rank, proc in enumerate(self._procs)})
        return collect_ranks(
            world_size=self.world_size,
            timeout=timeout,
            waitables=waitables,
            hear=lambda ready, rank: self._hear(ready, rank, kind),
            names=self._names,
            fail=lambda failures: failure_error(
                failures,
                names=self._names,
                order=sorted(failures),
                first=next(iter(failures)),  # dicts keep insertion order: the earliest failure
            ),
        )

    def _hear(self, ready: Any, rank: int, kind: str) -> Heard:
        """What rank's pipe (a message) or process sentinel (its death) says."""
        if ready is self._conns[rank]:
            try:
                tag, value = pickle.loads(ready.recv_bytes())
            except (EOFError, OSError):
                return Heard(hearing=Hearing.OTHER)  # the sentinel reports the death with its exit code
            if tag == kind:
                return Heard(hearing=Hearing.DONE, value=value)
            if tag == "error":
                return Heard(hearing=Hearing.FAILED, value=value)
            return Heard(hearing=Hearing.ALIVE)
        proc = self._procs[rank]
        proc.join(0.1)
        helper_gone = proc.exitcode == 255 and _helper_gone()
        died = f"worker process (pid {proc.pid}) died with exit code {proc.exitcode}"
        if not helper_gone:
            return Heard(hearing=Hearing.FAILED, value=died)
        # Every worker of that helper dies with it (PR_SET_PDEATHSIG): worth waiting for all
        # of them, so the error names every rank.
        return Heard(hearing=Hearing.FAILED, value=died + _HELPER_GONE, wait_for_peers=HELPER_GONE_GRACE_SECONDS)


_HELPER_GONE = " (the forkserver helper that started it is gone, and the worker was killed with it: PR_SET_PDEATHSIG)"
