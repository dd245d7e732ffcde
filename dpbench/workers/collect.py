"""Waiting for one answer from every rank: the loop both pools run for each call.

The local :class:`~dpbench.workers.pool.WorkerPool` and the cluster's ``RemotePool``
(:mod:`dpbench.cluster.remote`) differ in what they wait on (a worker's pipe and its process
sentinel; an agent's connection) and in how they name a rank ("rank 1"; "rank 1 (node 1, host
b12)"). What happens while they wait is the same, and written here once: a rank's error or death
starts a short grace for the other ranks' failures, so the error names every rank that went wrong
(:data:`~dpbench.workers.base.FAILURE_GRACE_SECONDS`); a rank silent for ``timeout`` seconds
raises :class:`~dpbench.workers.base.WorkerTimeoutError` naming every silent rank.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any

from dpbench.workers.base import FAILURE_GRACE_SECONDS, WorkerError, WorkerTimeoutError

__all__ = ["Heard", "Hearing", "RankNames", "collect_ranks", "failure_error", "timeout_error"]


class Hearing(enum.Enum):
    """What one message (or one death) says about its rank."""

    DONE = "done"
    """The rank answered the call: ``Heard.value`` is its answer."""
    ALIVE = "alive"
    """The rank is working (a heartbeat, its start-up report): its silence clock restarts."""
    FAILED = "failed"
    """The rank raised, died or lost its connection: ``Heard.value`` says how."""
    OTHER = "other"
    """Nothing about this call (a closed pipe whose death the sentinel reports, a late word from
    an earlier pool): the silence clock runs on."""


@dataclass(kw_only=True, frozen=True)
class Heard:
    """One ready pipe, connection or sentinel, read by the pool that waits on it."""

    hearing: Hearing
    """What it says about its rank."""
    value: Any = None
    """The answer (``DONE``) or how the rank failed (``FAILED``, text); None otherwise."""
    wait_for_peers: float = 0.0
    """After this failure, listen at least this long for the other ranks' failures (beyond
    ``FAILURE_GRACE_SECONDS``): a failure that takes other ranks with it waits for them all."""


@dataclass(kw_only=True, frozen=True)
class RankNames:
    """How a pool names its ranks in the errors it raises."""

    label: Callable[[int], str]
    """One rank, as the heading of its failure: "rank 1", "rank 1 (node 1, host b12)"."""
    group: Callable[[Sequence[int]], str]
    """Several ranks in one sentence: "rank 0, 1", "rank 0 (node 0, host a1), rank 1 (node 1, host b12)"."""
    world: str
    """The pool's size as a failure gives it: "world_size=2", "world_size=4 on 2 node(s)"."""
    stopped: str
    """What became of the workers after a silence: "the workers were stopped"."""


def failure_error(failures: Mapping[int, str], *, names: RankNames, order: Sequence[int], first: int) -> WorkerError:
    """The error for ``failures`` (rank → traceback or how it died), listed in ``order``;
    ``first`` is the rank :attr:`WorkerError.rank` names."""
    details = "\n".join(f"--- {names.label(r)} ---\n{str(failures[r]).rstrip()}" for r in order)
    return WorkerError(
        f"worker {names.group(order)} failed ({names.world}):\n{details}",
        rank=first,
        failures=dict(failures),
    )


def timeout_error(silent: Sequence[int], timeout: float, *, names: RankNames) -> WorkerTimeoutError:
    """The error for ranks ``silent`` that sent nothing for ``timeout`` seconds."""
    return WorkerTimeoutError(
        f"no message from worker {names.group(silent)} for {timeout:g} s (timeout); {names.stopped}. "
        f"Raise `timeout` if a single step legitimately takes this long.",
        rank=silent[0],
        failures={r: f"silent for {timeout:g} s" for r in silent},
    )


def collect_ranks(
    *,
    world_size: int,
    timeout: float,
    waitables: Mapping[Any, int],
    hear: Callable[[Any, int], Heard],
    names: RankNames,
    fail: Callable[[dict[int, str]], WorkerError],
    failed: Mapping[int, str] | None = None,
) -> list[Any]:
    """Every rank's answer, by rank; raise when a rank fails or stays silent.

    ``waitables``: what to wait on (``multiprocessing.connection.wait``), each with the rank it
    speaks for, in the order to wait on them (a rank may have several: its pipe and its process
    sentinel). ``hear(ready, rank)``: what a ready one says. ``fail(failures)``: the error for the
    failed ranks (rank → text, earliest first). ``failed``: ranks known to have failed before the
    wait began (their grace starts now). ``timeout``: seconds a rank may stay silent.
    """
    results: dict[int, Any] = {}
    failures: dict[int, str] = dict(failed or {})
    last_heard = {rank: time.monotonic() for rank in range(world_size)}
    first_failure_at = time.monotonic() if failures else None
    grace = FAILURE_GRACE_SECONDS
    while len(results) < world_size:
        now = time.monotonic()
        if first_failure_at is not None:
            # Every rank answered or failed: nothing is left for the grace to hear.
            if now - first_failure_at >= grace or len(results) + len(failures) >= world_size:
                break
            wait_for = first_failure_at + grace - now
        else:
            pending = [r for r in range(world_size) if r not in results]
            silent = [r for r in pending if now - last_heard[r] >= timeout]
            if silent:
                raise timeout_error(silent, timeout, names=names)
            wait_for = min(last_heard[r] + timeout for r in pending) - now
        waiting = [w for w, r in waitables.items() if r not in results and r not in failures]
        # Blocked in the OS until a pipe has bytes or a process ends (no polling): the parent
        # stays asleep while steps run.
        for ready in wait(waiting, timeout=max(0.0, wait_for)):
            rank = waitables[ready]
            if rank in results or rank in failures:
                continue  # settled earlier in this batch (a pipe's error, then its sentinel): nothing to add
            heard = hear(ready, rank)
            if heard.hearing is not Hearing.OTHER:
                last_heard[rank] = time.monotonic()
            if heard.hearing is Hearing.DONE:
                results[rank] = heard.value
            elif heard.hearing is Hearing.FAILED:
                failures[rank] = heard.value
                grace = max(grace, heard.wait_for_peers)
                if first_failure_at is None:
                    first_failure_at = time.monotonic()
    if failures:
        raise fail(failures)
    return [results[rank] for rank in range(world_size)]
