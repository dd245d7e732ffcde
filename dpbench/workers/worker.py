"""The worker side of :class:`dpbench.launcher.WorkerPool`: one rank's process.

A worker sets up its device and (optionally) its torch.distributed process group, reports
"ready", then serves calls from the parent until told to close or the parent goes away.
Every message is ``(tag, value)`` as standard-pickle bytes: "ready" (with the worker's
facts), "alive" (heartbeat), "result" or "error" (with the formatted traceback).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from multiprocessing.connection import Connection
from typing import Any

__all__ = ["HEARTBEAT_EVERY_S", "WorkerContext"]

# Far below any timeout a pool accepts in practice (default 60 s), far above a training step.
HEARTBEAT_EVERY_S = 1.0


@dataclass
class WorkerContext:
    """What a function run by :meth:`WorkerPool.run` receives as its first argument.

    ``state`` is a dict that lives in the worker between calls (a trainer keeps its model
    there); ``at_close(fn)`` registers a clean-up run when the worker shuts down.
    ``heartbeat()`` tells the parent this rank is still making progress, which restarts
    its timeout — call it between units of work in long functions. It sends at most one
    message per ``HEARTBEAT_EVERY_S``: a message per training step would wake the parent once a
    step, on the cores the step's threads are using, and slow the step (measurements:
    docs/calibration.md#harness-overhead). ``keep_alive(seconds)`` beats for a block that cannot
    (a ``torch.compile`` building its kernels), for at most ``seconds``.
    """

    rank: int
    world_size: int
    device: Any  # torch.device; typed loosely so this module imports without torch
    backend: str | None
    group: Any = None
    state: dict[str, Any] = field(default_factory=dict)
    _conn: Connection | None = field(default=None, repr=False)
    _cleanups: list[Callable[[], Any]] = field(default_factory=list, repr=False)
    _last_beat: float = field(default=-float("inf"), repr=False)
    # keep_alive's thread and the caller's heartbeat() share the pipe: one message at a time.
    _send_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def at_close(self, fn: Callable[[], Any]) -> None:
        """Call ``fn()`` when the worker shuts down (before the process group is destroyed)."""
        self._cleanups.append(fn)

    def heartbeat(self) -> None:
        with self._send_lock:
            now = time.monotonic()
            if self._conn is not None and now - self._last_beat >= HEARTBEAT_EVERY_S:
                self._last_beat = now
                tell(self._conn, ("alive", None))  # a parent gone: the serving loop leaves on its next send

    @contextlib.contextmanager
    def keep_alive(self, seconds: float) -> Iterator[None]:
        """Heartbeats from a thread while the block runs, for at most ``seconds``: a long unit of
        work that cannot call :meth:`heartbeat` itself is not taken for a hang, and a block that
        really hangs still is — the parent's ``timeout`` runs from the last beat, so it gives up
        ``seconds + timeout`` after the block began. The thread is joined before the block's
        caller goes on: the call's result is never sent beside a beat."""
        stop = threading.Event()
        deadline = time.monotonic() + seconds

        def beat() -> None:
            while not stop.wait(HEARTBEAT_EVERY_S) and time.monotonic() < deadline:
                self.heartbeat()

        thread = threading.Thread(target=beat, name="dpbench-keep-alive", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()


@dataclass(frozen=True)
class WorkerConfig:
    world_size: int
    device_type: str
    backend: str | None
    store_path: str
    timeout: float
    threads: int | None
    # The cores this rank is pinned to (None: left as inherited); see workers/affinity.py.
    cpus: tuple[int, ...] | None
    # The forkserver helper keeps the environment of the moment it started; workers get
    # the parent's environment as it is now (CUDA_VISIBLE_DEVICES, NCCL_*, ...).
    environ: dict[str, str]
    # How long a rank waits in one collective for the others (the process group's timeout;
    # None: ``timeout``). Longer where set-up compiles: a rank that compiled first waits in the
    # warm-up step's first collective for the slowest rank's compile.
    collective_timeout: float | None = None
    # dpbench.cluster hook: ranks on several hosts meet through this picklable callable's
    # torch.distributed Store (None: the FileStore at store_path), and the socket interfaces
    # must not default to loopback there (loopback=False).
    store_factory: Callable[[], Any] | None = None
    loopback: bool = True
    # This rank's index among the pool's ranks on its node (torchrun's LOCAL_RANK, set by
    # dpbench.cluster.agent); None on one host, where it is the rank itself.
    local_rank: int | None = None


def _worker_device(rank: int, device_type: str, local_rank: int | None = None):
    import torch

    if device_type == "cuda":
        # The local index, not the global rank: on node 1 of a cluster rank 5 may be the
        # node's second rank, and its CPU block (workers/affinity.py) follows that index too.
        local = rank if local_rank is None else local_rank
        index = local % torch.cuda.device_count()
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")


def _pin(cpus: tuple[int, ...] | None) -> str | None:
    """Pin this (still single-threaded) process to ``cpus``; → None, or why it failed.

    A failure is reported in the worker's facts, not raised: pinning only steadies the
    timings, and the plan came from cores this process family may use, so it should not
    fail short of a cpuset changing under us.
    """
    if cpus is None:
        return None
    try:
        os.sched_setaffinity(0, cpus)
    except (OSError, AttributeError) as exc:
        return f"sched_setaffinity({list(cpus)}) failed: {type(exc).__name__}: {exc}"
    return None


def _set_threads(torch: Any, threads: int | None) -> None:
    """Intra-op threads (and one inter-op thread) before this worker's first parallel work.

    Measured in forkserver children (torch 2.13, OpenMP build): torch's OpenMP and MKL
    runtimes were initialised in the forkserver when it imported torch, so OMP_NUM_THREADS
    and MKL_NUM_THREADS set here do not change this worker (get_num_threads stays at the
    core count); ``torch.set_num_threads`` does, for both OpenMP and MKL. The variables are
    still set because processes this worker starts (inductor's compile workers, spawned
    data loaders) read them when they import torch. The inter-op pool is created on first
    use, so ``set_num_interop_threads`` still works here; it fails only if something in
    the worker already started the pool, which is then reported in the facts as it is.
    """
    if threads is None:
        return
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)
    torch.set_num_threads(threads)
    try:
        # Nothing dpbench runs uses the inter-op pool; one thread keeps it off the cores.
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass


# Environment that changes how collectives, threads and fp32 maths behave, reported with the facts.
# The last two change the math of fp32 matmuls (and NVIDIA_TF32_OVERRIDE=0 convolutions too)
# whatever torch's own settings say.
_FACT_ENV_PREFIXES = (
    "NCCL_",
    "TORCH_NCCL_",
    "GLOO_",
    "TORCH_GLOO_",
    "OMP_",
    "GOMP_",
    "MKL_",
    "KMP_",
    "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE",
    "NVIDIA_TF32_OVERRIDE",
)
# NGC's images set it to 1; torch reads it (exactly "1") once, when it loads.
TF32_CUBLAS_OVERRIDE = "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"


def _cublas_allows_tf32(torch: Any) -> bool:
    """The TF32 switch torch hands cuBLAS (what ``allowTF32CuBLAS`` answers, the override included
    where torch applies it); False where it cannot be read."""
    try:
        return bool(torch.backends.cuda.matmul.allow_tf32)
    except (AttributeError, RuntimeError):  # mixed legacy/new settings raise in the legacy getter
        return False


def _matmul_precision(torch: Any) -> str:
    """The precision fp32 matmuls run at, in torch's words ("highest", "high" = TF32, "medium").

    torch's setting, except where the setting reads "highest" while the switch torch hands cuBLAS
    says TF32: a torch from before its per-backend API (2.9) ORs TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1
    into that switch, so its matmuls run in TF32 whatever the setting says ("high" is reported).
    The legacy getter raises once a user mixed it with the new per-backend API (torch 2.13): then
    the new API's matmul setting is reported."""
    try:
        setting = torch.get_float32_matmul_precision()
    except RuntimeError:
        return f"fp32_precision={torch.backends.cuda.matmul.fp32_precision}"
    if setting == "highest" and _cublas_allows_tf32(torch):
        return "high"
    return setting


def worker_facts(
    rank: int, device_type: str, affinity_error: str | None, runtime_env: dict[str, str] | None = None
) -> dict[str, Any]:
    """What this worker actually runs with (JSON-safe), sent to the parent at "ready".

    ``rank``, ``pid``, ``cpu_affinity`` (sorted core list; None where the OS cannot tell),
    ``affinity_error`` (None, or why pinning failed), ``torch_threads``, ``interop_threads``,
    ``float32_matmul_precision`` (what fp32 matmuls run at: :func:`_matmul_precision`),
    ``tf32_override`` (``"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1"`` where that variable asks torch
    for TF32 matmuls, else None), ``cudnn_benchmark`` / ``cudnn_deterministic`` (None on
    CPU), ``env`` (the NCCL_*, TORCH_NCCL_*, GLOO_*, TORCH_GLOO_*, OMP_*, GOMP_*, MKL_*,
    KMP_* variables it sees, and TORCH_ALLOW_TF32_CUBLAS_OVERRIDE and NVIDIA_TF32_OVERRIDE;
    NCCL_ALGO / NCCL_PROTO absent = NCCL's own choice) and
    ``runtime_env`` (the OMP_* / GOMP_* / KMP_* / MKL_* environment it inherited — under the
    forkserver, what torch's OpenMP runtime was initialised with).
    """
    import torch

    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    facts: dict[str, Any] = {
        "rank": rank,
        "pid": os.getpid(),
        "cpu_affinity": cpus,
        "affinity_error": affinity_error,
        "torch_threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "float32_matmul_precision": _matmul_precision(torch),
        "tf32_override": f"{TF32_CUBLAS_OVERRIDE}=1" if os.environ.get(TF32_CUBLAS_OVERRIDE) == "1" else None,
        "cudnn_benchmark": None,
        "cudnn_deterministic": None,
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(_FACT_ENV_PREFIXES)},
        "runtime_env": dict(runtime_env or {}),
    }
    if device_type == "cuda":
        facts["cudnn_benchmark"] = bool(torch.backends.cudnn.benchmark)
        facts["cudnn_deterministic"] = bool(torch.backends.cudnn.deterministic)
    return facts


def tell(conn: Connection, message: Any) -> bool:
    """Send ``message`` (a tuple, or bytes already pickled) to the parent; False where the parent is
    gone. A run stopped while this rank still starts or works closes the pipe: the rank then leaves
    quietly, where an escaping BrokenPipeError printed a ``Process dpbench-rank0:`` traceback below
    the run's last line."""
    try:
        conn.send_bytes(message if isinstance(message, bytes) else pickle.dumps(message))
    except (BrokenPipeError, ConnectionResetError):
        return False
    return True


def worker_main(rank: int, conn: Connection, config: WorkerConfig) -> None:
    from dpbench.workers.lifeline import guard_worker
    from dpbench.workers.runtime_env import user_runtime_env

    # The parent owns Ctrl-C: it stops the workers itself, so a terminal SIGINT sent to the
    # whole process group must not make ranks die half-way through a collective.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # First, while this is the process's only thread: every thread created later (OpenMP,
    # MKL, gloo, NCCL) inherits the affinity of the thread that creates it.
    affinity_error = _pin(config.cpus)
    # Then (its watch thread pinned too): this worker dies with the forkserver helper and leaves
    # when its parent does, however that one ends (see workers/lifeline.py).
    guard_worker(os.path.dirname(config.store_path) if config.store_path else None)
    # What torch's runtimes were initialised with: a forkserver child inherits the helper's
    # environment, read by libgomp when the helper imported torch (see runtime_env.py).
    runtime_env = user_runtime_env(os.environ)
    os.environ.clear()
    os.environ.update(config.environ)
    try:
        if config.loopback and sys.platform.startswith("linux"):
            # Gloo's pairwise connections and NCCL's bootstrap stay on loopback (all ranks
            # are on this machine); a user setting wins.
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
            os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
        import torch
        import torch.distributed as dist

        _set_threads(torch, config.threads)
        device = _worker_device(rank, config.device_type, config.local_rank)
        group = None
        if config.backend is not None:
            store = (
                config.store_factory()
                if config.store_factory is not None
                else dist.FileStore(config.store_path, config.world_size)
            )
            dist.init_process_group(
                config.backend,
                store=store,
                rank=rank,
                world_size=config.world_size,
                # Collectives give up on their own too, so a rank never blocks forever even
                # if the parent is gone.
                timeout=timedelta(seconds=config.collective_timeout or config.timeout),
            )
            group = dist.group.WORLD
        ctx = WorkerContext(rank, config.world_size, device, config.backend, group, _conn=conn)
        ready = ("ready", worker_facts(rank, config.device_type, affinity_error, runtime_env))
    except BaseException:
        tell(conn, ("error", traceback.format_exc()))
        return
    if not tell(conn, ready):
        return
    try:
        while True:
            try:
                data = conn.recv_bytes()
            except EOFError:  # parent went away: nothing left to serve
                return
            try:
                # Unpickling the call can fail too (a module the worker cannot import), and
                # so can pickling the result: both must reach the parent as this rank's error.
                message = pickle.loads(data)
                if message[0] == "close":
                    return
                _, fn, args, kwargs = message
                payload = pickle.dumps(("result", fn(ctx, *args, **kwargs)))
            except BaseException:
                payload = pickle.dumps(("error", traceback.format_exc()))
            if not tell(conn, payload):
                return
    finally:
        for cleanup in reversed(ctx._cleanups):
            try:
                cleanup()
            except Exception:  # shutting down anyway; one failing clean-up must not skip the rest
                traceback.print_exc()
        if config.backend is not None:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
