"""Run replicas concurrently, carrying the caller's grad/inference/autocast state into each thread.

Grad mode, inference mode and autocast (enabled flag *and* dtype, which torch drops) are
thread-local in torch, so a worker thread starts from the defaults; each replica re-enters the
caller's state. :class:`ReplicaThreads` keeps daemon worker threads alive between calls
(torch starts new threads every forward); the caller's thread runs replica 0 itself.
"""

from __future__ import annotations

import queue
import sys
import threading
import traceback
import weakref
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from itertools import chain
from typing import Any

import torch
from torch import nn

from ._devices import DeviceLike, parse_device

__all__ = ["parallel_apply", "ReplicaThreads", "ThreadState"]


class _KeyErrorMessage(str):
    """KeyError reprs its argument; this keeps the multi-line message readable."""

    def __repr__(self) -> str:
        return str(self)


class _CapturedError:
    """An exception from a replica, kept as text (not the traceback object, which pins frames)."""

    def __init__(self, where: str):
        exc_type, exc, tb = sys.exc_info()
        self.exc_type = exc_type
        self.text = "".join(traceback.format_exception(exc_type, exc, tb))
        self.where = where

    def reraise(self) -> None:
        msg = f"Caught {self.exc_type.__name__} {self.where}.\nOriginal {self.text}"
        if self.exc_type is KeyError:
            msg = _KeyErrorMessage(msg)
        try:
            exc = self.exc_type(msg)
        except Exception:
            # Some exception types take several arguments; fall back rather than lose the message.
            raise RuntimeError(msg) from None
        raise exc


_applied = threading.local()  # per worker thread: the intra-op thread count already set there


@dataclass(frozen=True)
class ThreadState:
    """The thread-local torch state a replica must run under."""

    grad_enabled: bool
    inference_mode: bool
    autocast: tuple[tuple[str, torch.dtype], ...]  # (device type, dtype) for each enabled autocast
    autocast_cache: bool
    num_threads: int  # intra-op threads (torch.get_num_threads)

    @classmethod
    def capture(cls) -> ThreadState:
        types = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
        return cls(
            grad_enabled=torch.is_grad_enabled(),
            inference_mode=torch.is_inference_mode_enabled(),
            autocast=tuple((t, torch.get_autocast_dtype(t)) for t in types if torch.is_autocast_enabled(t)),
            autocast_cache=torch.is_autocast_cache_enabled(),
            num_threads=torch.get_num_threads(),
        )

    def enter(self, stack: ExitStack) -> None:
        # A thread that torch did not start does not pick up torch.set_num_threads: its BLAS
        # calls use the library default (all cores). Replicas then oversubscribe the CPU and run
        # many times slower (docs/calibration.md#replica-threads); so apply the caller's count, once per thread.
        if getattr(_applied, "num_threads", None) != self.num_threads:
            torch.set_num_threads(self.num_threads)
            _applied.num_threads = self.num_threads
        if self.inference_mode:
            stack.enter_context(torch.inference_mode())
        stack.enter_context(torch.set_grad_enabled(self.grad_enabled))
        for device_type, dtype in self.autocast:
            stack.enter_context(torch.autocast(device_type, dtype=dtype, cache_enabled=self.autocast_cache))


def _first_tensor(obj: Any) -> torch.Tensor | None:
    if isinstance(obj, torch.Tensor):
        return obj
    items = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()
    for item in items:
        found = _first_tensor(item)
        if found is not None:
            return found
    return None


def _module_device(module: nn.Module) -> torch.device:
    """Where a replica runs when neither ``devices`` nor its inputs say: the device of its first
    tensor; for a module without any, the current CUDA device (torch's choice), or the CPU."""
    for m in module.modules():
        # A replica holds its parameters as plain attributes (module.parameters() is empty).
        for t in chain(m._parameters.values(), m._buffers.values(), vars(m).values()):
            if isinstance(t, torch.Tensor):
                return t.device
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _make_task(i, module, args, kwargs, device, stream, state: ThreadState) -> Callable[[], Any]:
    caller = threading.get_ident()

    def task() -> Any:
        try:
            with ExitStack() as stack:
                if device.type == "cuda":
                    # Current device and stream are per thread: use the caller's stream so the
                    # replica's kernels are ordered after the scatter copies queued on it.
                    stack.enter_context(torch.cuda.device(device))
                    stack.enter_context(torch.cuda.stream(stream))
                if threading.get_ident() != caller:  # the caller's own thread is already in that state
                    state.enter(stack)
                return module(*args, **kwargs)
        except Exception:
            return _CapturedError(f"in replica {i} on device {device}")

    return task


def _worker_loop(jobs: queue.SimpleQueue) -> None:
    while True:
        job = jobs.get()
        if job is None:  # close(): leave the loop so the thread ends
            return
        index, task, done = job
        try:
            result = task()
        except BaseException:  # noqa: BLE001 - the caller is blocked on `done`; it must always get an answer
            result = _CapturedError(f"in replica {index}")
        done.put((index, result))
        # Drop references to replicas and outputs now, not when the next job arrives.
        del job, task, done, result


def _stop(queues: list, threads: list) -> None:
    for q in queues:
        q.put(None)
    me = threading.current_thread()
    for t in threads:
        if t is not me:
            # Workers only block on their queue between jobs, so this returns promptly; the
            # timeout guards against a replica stuck inside user code (threads are daemons).
            t.join(timeout=5.0)
    queues.clear()
    threads.clear()


class ReplicaThreads:
    """Persistent daemon threads for replicas 1..n-1; the calling thread runs replica 0.

    Threads are started on demand and reused by every later call. :meth:`close` (or garbage
    collection of this object) stops them; a later :meth:`run` starts fresh ones.
    """

    def __init__(self, name: str = "dpbench-replica"):
        self._name = name
        self._queues: list[queue.SimpleQueue] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        # The finalizer holds the lists, not self, so the threads never keep this object alive.
        self._finalizer = weakref.finalize(self, _stop, self._queues, self._threads)

    @property
    def num_threads(self) -> int:
        return len(self._threads)

    def _ensure(self, count: int) -> None:
        # Caller holds self._lock.
        while len(self._threads) < count:
            jobs: queue.SimpleQueue = queue.SimpleQueue()
            thread = threading.Thread(
                target=_worker_loop, args=(jobs,), name=f"{self._name}-{len(self._threads) + 1}", daemon=True
            )
            thread.start()
            self._queues.append(jobs)
            self._threads.append(thread)

    def run(self, tasks: Sequence[Callable[[], Any]]) -> list[Any]:
        """Run ``tasks`` concurrently and return their results in order (tasks must not raise)."""
        if len(tasks) == 1:
            return [tasks[0]()]
        done: queue.SimpleQueue = queue.SimpleQueue()
        # Submit under the lock: a close() from another thread then queues its stop signal
        # behind these jobs (FIFO), so they still run and this call cannot wait forever.
        with self._lock:
            self._ensure(len(tasks) - 1)
            for index, task in enumerate(tasks[1:], start=1):
                self._queues[index - 1].put((index, task, done))
        results: list[Any] = [None] * len(tasks)
        results[0] = tasks[0]()
        # Wait for every worker even if replica 0 failed: no replica may still be running (and
        # touching shared modules) after this call returns.
        for _ in range(len(tasks) - 1):
            index, result = done.get()
            results[index] = result
        return results

    def close(self) -> None:
        with self._lock:
            _stop(self._queues, self._threads)


def parallel_apply(
    modules: Sequence[nn.Module],
    inputs: Sequence[Any],
    kwargs_tup: Sequence[dict[str, Any]] | None = None,
    devices: Sequence[DeviceLike | None] | None = None,
    *,
    threads: ReplicaThreads | None = None,
) -> list[Any]:
    """Call ``modules[i](*inputs[i], **kwargs_tup[i])`` concurrently and return the outputs in order.

    An input that is not a list/tuple is passed as the single argument. ``devices`` (default:
    the device of each input's first tensor, else the module's) sets the CUDA device and
    stream per replica, and names the device in errors.
    ``threads`` reuses persistent worker threads; without it, temporary threads are used for
    this call. A failing replica is re-raised here as the same exception type with
    "Caught <Type> in replica <i> on device <d>." and the original traceback.
    """
    n = len(modules)
    if len(inputs) != n:
        raise ValueError(f"inputs: the number of modules {n} is not equal to the number of inputs {len(inputs)}")
    if kwargs_tup is None:
        kwargs_tup = [{}] * n
    elif len(kwargs_tup) != n:
        raise ValueError(
            f"kwargs_tup: the number of modules {n} is not equal to the number of kwargs_tup {len(kwargs_tup)}"
        )
    if devices is None:
        devices = [None] * n
    elif len(devices) != n:
        raise ValueError(f"devices: the number of modules {n} is not equal to the number of devices {len(devices)}")
    if n == 0:
        return []

    state = ThreadState.capture()
    tasks = []
    for i, (module, args, kwargs, device) in enumerate(zip(modules, inputs, kwargs_tup, devices)):
        if device is None:
            found = _first_tensor(args)
            dev = found.device if found is not None else _module_device(module)
        else:
            dev = parse_device(device, argument=f"devices[{i}]")
        stream = torch.cuda.current_stream(dev) if dev.type == "cuda" else None
        if not isinstance(args, (list, tuple)):
            args = (args,)  # a lone tensor is one argument, never unpacked along its batch
        tasks.append(_make_task(i, module, args, kwargs, dev, stream, state))

    if threads is None:
        temporary = ReplicaThreads()
        try:
            results = temporary.run(tasks)
        finally:
            temporary.close()
    else:
        results = threads.run(tasks)
    for result in results:
        if isinstance(result, _CapturedError):
            result.reraise()
    return results
