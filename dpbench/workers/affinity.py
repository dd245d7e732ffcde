"""CPU pinning for :class:`dpbench.launcher.WorkerPool`: which cores each rank and the parent get.

Why pin: on a machine with few cores, the scheduler moves ranks (and their intra-op threads)
between cores and lets them land on the same core for a while; one trial then runs slower
than the next for reasons that have nothing to do with the code. Giving each rank its own
cores, and keeping the parent (which polls the pipes) and the resource sampler's thread off
them when there are cores to spare, removes that source of between-trial variance.

The plan is a pure function of (mode, cores, ranks, threads) so it can be tested with fake
core lists; applying it (``move_threads`` / ``restore_threads``) is separate.

Linux semantics that shape the code: ``sched_setaffinity(0, …)`` sets the *calling thread*
only, and a new thread inherits the affinity of the thread that creates it. A worker
therefore pins its single main thread first thing (a forkserver child starts with one
thread), and every thread torch and gloo create later inherits it. The parent, which may
already run several threads, is moved thread by thread through ``/proc/self/task``.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "AFFINITY_MODES",
    "PIN_ENV",
    "AffinityPlan",
    "plan_affinity",
    "resolve_mode",
    "pinning_supported",
    "current_cores",
    "ParentAffinity",
]

AFFINITY_MODES = ("auto", "off")
# DPBENCH_PIN=0 turns pinning off for every pool of the process, so a suite run can be
# compared pinned vs unpinned without touching the suites.
PIN_ENV = "DPBENCH_PIN"
_PIN_VALUES = ("0", "1")


@dataclass(kw_only=True, frozen=True)
class AffinityPlan:
    """Where a pool's ranks and its parent run.

    ``rank_cores[r]``: the cores rank r is pinned to (None when nothing is pinned).
    ``parent_cores``: the cores the parent's threads are moved to while the pool is open
    (None when the parent is left alone: pinning off, or no core to spare).
    """

    mode: str
    pinned: bool
    reason: str
    available_cores: tuple[int, ...]
    rank_cores: tuple[tuple[int, ...], ...] | None = None
    parent_cores: tuple[int, ...] | None = None

    def to_dict(self) -> dict:
        """JSON-safe: lists instead of tuples."""
        return {
            "mode": self.mode,
            "pinned": self.pinned,
            "reason": self.reason,
            "available_cores": list(self.available_cores),
            "rank_cores": None if self.rank_cores is None else [list(c) for c in self.rank_cores],
            "parent_cores": None if self.parent_cores is None else list(self.parent_cores),
        }


def pinning_supported() -> bool:
    return hasattr(os, "sched_setaffinity") and hasattr(os, "sched_getaffinity")


def current_cores() -> tuple[int, ...] | None:
    """The cores the calling thread may run on, sorted (None where the OS does not say)."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    return tuple(sorted(os.sched_getaffinity(0)))


def resolve_mode(affinity: object, environ: Mapping[str, str]) -> tuple[str, str | None]:
    """Check ``affinity`` and apply ``DPBENCH_PIN``; → (mode, why it is off or None)."""
    if affinity not in AFFINITY_MODES:
        raise ValueError(f"affinity must be one of {', '.join(map(repr, AFFINITY_MODES))}, got {affinity!r}")
    pin = environ.get(PIN_ENV, "").strip()
    if pin and pin not in _PIN_VALUES:
        raise ValueError(f"{PIN_ENV} must be '0' (pinning off) or '1' (as the pool's affinity says), got {pin!r}")
    if pin == "0":
        return "off", f"{PIN_ENV}=0 in the environment"
    if affinity == "off":
        return "off", "affinity='off'"
    return "auto", None


def plan_affinity(
    *,
    mode: str,
    cores: Sequence[int] | None,
    world_size: int,
    threads_per_worker: int,
    cores_per_worker: int | None = None,
    off_reason: str | None = None,
) -> AffinityPlan:
    """Give each rank its own consecutive block of cores; the rest go to the parent.

    ``cores``: the cores this process may use (None: the platform cannot pin).
    ``cores_per_worker``: how many cores each rank's block spans. None → an equal share of
    all cores (cores // world_size), never fewer than ``threads_per_worker`` — a worker may
    run more threads than its intra-op count (dp runs one Python thread per replica), so
    the default never shrinks what a worker could use below its fair share. Pass it
    explicitly to reserve the remaining cores for the parent and the sampler.
    Blocks follow the sorted core numbering, which keeps a block within one NUMA node on
    usual Linux numbering.
    """
    available = tuple(sorted(cores)) if cores is not None else ()
    if mode == "off":
        return AffinityPlan(mode=mode, pinned=False, reason=off_reason or "pinning off", available_cores=available)
    if cores is None:
        return AffinityPlan(
            mode=mode,
            pinned=False,
            available_cores=available,
            reason=f"os.sched_setaffinity is not available on this platform ({sys.platform})",
        )
    n = len(available)
    if n < world_size:
        return AffinityPlan(
            mode=mode,
            pinned=False,
            available_cores=available,
            reason=f"fewer cores ({n}) than ranks ({world_size}): left to the OS scheduler",
        )
    if cores_per_worker is None:
        if world_size * threads_per_worker > n:
            return AffinityPlan(
                mode=mode,
                pinned=False,
                available_cores=available,
                reason=(
                    f"{world_size} rank(s) x {threads_per_worker} thread(s) > {n} cores (oversubscribed): "
                    "left to the OS scheduler"
                ),
            )
        block = n // world_size
    else:
        if world_size * cores_per_worker > n:
            return AffinityPlan(
                mode=mode,
                pinned=False,
                available_cores=available,
                reason=f"{world_size} rank(s) x {cores_per_worker} core(s) > {n} cores: left to the OS scheduler",
            )
        block = cores_per_worker
    rank_cores = tuple(available[r * block : (r + 1) * block] for r in range(world_size))
    spare = available[world_size * block :]
    if spare:
        where = f"parent and sampler on the {len(spare)} spare core(s) {list(spare)}"
    else:
        where = "no spare core: the parent is not moved"
    return AffinityPlan(
        mode=mode,
        pinned=True,
        available_cores=available,
        rank_cores=rank_cores,
        parent_cores=spare or None,
        reason=f"{world_size} rank(s) x {block} core(s) each; {where}",
    )


def _thread_ids() -> list[int]:
    """Native ids of this process's threads (only the calling one where /proc is missing)."""
    try:
        return [int(tid) for tid in os.listdir("/proc/self/task")]
    except OSError:
        return [threading.get_native_id()]


# One pool at a time moves the parent: a second pool opened meanwhile plans inside the
# first one's spare cores (the parent's affinity at that moment) and leaves the parent be,
# so closing the pools in any order restores the parent exactly once.
_owner_lock = threading.Lock()
_owner: object | None = None


class ParentAffinity:
    """Moves every thread of this process to some cores, and puts each one back later."""

    def __init__(self) -> None:
        self._saved: dict[int, set[int]] = {}
        self._default: set[int] | None = None
        self.moved = False

    def move(self, cores: Sequence[int]) -> bool:
        """Move all threads to ``cores``; False (nothing done) when another pool already did."""
        global _owner
        with _owner_lock:
            if _owner is not None:
                return False
            _owner = self
        self._default = os.sched_getaffinity(0)
        for tid in _thread_ids():
            try:
                self._saved[tid] = os.sched_getaffinity(tid)
                os.sched_setaffinity(tid, cores)
            except OSError:  # the thread exited between the listing and the call
                self._saved.pop(tid, None)
        self.moved = True
        return True

    def restore(self) -> None:
        """Put every thread back (threads born meanwhile get the caller's original cores); idempotent."""
        global _owner
        if not self.moved:
            return
        self.moved = False
        for tid in _thread_ids():
            try:
                os.sched_setaffinity(tid, self._saved.get(tid, self._default))
            except OSError:
                pass
        self._saved.clear()
        with _owner_lock:
            if _owner is self:
                _owner = None
