"""CPU pinning for :class:`dpbench.launcher.WorkerPool`: which cores each rank and the parent get.

Why pin: on a machine with few cores, the scheduler moves ranks (and their intra-op threads)
between cores and lets them land on the same core for a while; one trial then runs slower
than the next for reasons that have nothing to do with the code. Giving each rank its own
cores, and keeping the parent (which polls the pipes) and the resource sampler's thread off
them when there are cores to spare, removes that source of between-trial variance.

The plan is a pure function of (mode, cores, ranks, threads, the machine's topology) so it can
be tested with fake core lists and topologies; reading the topology (:func:`read_topology`, and
:func:`gpu_local_cpus` through NVML) and applying the plan (``move_threads`` /
``restore_threads``) are separate.

What a good plan respects on a big node: two logical CPUs of one physical core (SMT siblings,
hyperthreads) share its execution units, so each rank gets whole physical cores of its own — one
hyperthread of each before any sibling — and never a sibling of another rank's core; Linux
numbers the first thread of every core before any second thread (on a 2 × 56-core DGX: cpus 0–55
socket 0, 56–111 socket 1, 112–167 their siblings on socket 0, 168–223 on socket 1), so a block of
consecutive numbers is not a block of cores. And a rank driving a GPU runs on cores of that GPU's
NUMA node (what NVML calls its CPU affinity): its pinned host memory and its NCCL proxy thread
stay off the socket interconnect.

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
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "AFFINITY_MODES",
    "PIN_ENV",
    "AffinityPlan",
    "CpuTopology",
    "plan_affinity",
    "plan_for_host",
    "read_topology",
    "gpu_local_cpus",
    "parse_cpulist",
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


@dataclass(kw_only=True, frozen=True)
class CpuTopology:
    """Which logical CPUs share a physical core, as the kernel reports it."""

    cores: tuple[tuple[int, ...], ...]
    """Each physical core's logical CPUs (its SMT siblings), sorted; the cores by their first CPU."""

    @classmethod
    def from_siblings(cls, siblings: Iterable[Iterable[int]]) -> CpuTopology:
        """From each CPU's sibling list (repeats collapse: every sibling lists the same core)."""
        return cls(cores=tuple(sorted({tuple(sorted(set(group))) for group in siblings if group})))


def parse_cpulist(text: str) -> tuple[int, ...]:
    """The kernel's CPU list format (``"0-3,8,10-11"``) → sorted CPUs."""
    out: set[int] = set()
    for part in text.strip().split(","):
        if part:
            lo, _, hi = part.partition("-")
            out.update(range(int(lo), int(hi or lo) + 1))
    return tuple(sorted(out))


def read_topology(root: str = "/sys/devices/system/cpu") -> CpuTopology | None:
    """This machine's SMT siblings from sysfs (None where it does not say: not Linux, no sysfs)."""
    try:
        names = [n for n in os.listdir(root) if n.startswith("cpu") and n[3:].isdigit()]
        siblings = []
        for name in names:
            try:
                with open(os.path.join(root, name, "topology", "thread_siblings_list")) as fh:
                    siblings.append(parse_cpulist(fh.read()))
            except FileNotFoundError:  # an offline CPU has no topology directory
                continue
    except (OSError, ValueError):
        return None
    return CpuTopology.from_siblings(siblings) if siblings else None


def gpu_local_cpus(
    count: int, environ: Mapping[str, str], *, nvml: Any = None, cpu_count: int | None = None
) -> tuple[frozenset[int], ...] | None:
    """For each of ``count`` ranks, the CPUs near its GPU (``cuda:rank % devices`` in CUDA's order
    under ``CUDA_VISIBLE_DEVICES``): NVML's CPU affinity of the device, its NUMA node's CPUs (a
    MIG slice: its GPU's). None when NVML cannot say. ``nvml``: the NVML module (None: ``pynvml``);
    ``cpu_count``: CPUs the bitmask must cover (None: this machine's)."""
    from dpbench.sampler.gpus import probe_gpus, with_nvml

    words = -(-(cpu_count or os.cpu_count() or 1) // 64)  # pynvml's bitmask: 64-bit words

    def read(nvml: Any) -> tuple[frozenset[int], ...]:
        visible = probe_gpus(nvml, environ)  # pairs its own init with a shutdown: ours keeps NVML up
        near = []
        for gpu in visible:
            mask = nvml.nvmlDeviceGetCpuAffinity(nvml.nvmlDeviceGetHandleByUUID(gpu.parent_uuid or gpu.uuid), words)
            near.append(frozenset(64 * w + b for w, word in enumerate(mask) for b in range(64) if int(word) >> b & 1))
        return tuple(near[r % len(near)] for r in range(count))

    return with_nvml(nvml, read)


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
    topology: CpuTopology | None = None,
    near: Sequence[Collection[int] | None] | None = None,
) -> AffinityPlan:
    """Give each rank its own block of cores; the rest go to the parent.

    ``cores``: the cores this process may use (None: the platform cannot pin).
    ``cores_per_worker``: how many cores (logical CPUs) each rank's block spans. None → an equal
    share of all cores (cores // world_size), never fewer than ``threads_per_worker`` — a worker
    may run more threads than its intra-op count (dp runs one Python thread per replica), so the
    default never shrinks what a worker could use below its fair share. Pass it explicitly to
    reserve the remaining cores for the parent and the sampler.
    ``topology``: the machine's SMT siblings (None: every CPU a core of its own). A rank's block is
    made of whole physical cores of its own, one hyperthread of each before any sibling; only when
    there are too few physical cores for the blocks do ranks share them (the reason says so).
    ``near``: per rank, the CPUs near its GPU (:func:`gpu_local_cpus`; None: no GPU, or not
    known). Ranks of one GPU's NUMA node share its cores, an equal number each; when a node's cores
    cannot hold its ranks' blocks, the plan leaves locality out and says why.
    """
    available = tuple(sorted(cores)) if cores is not None else ()
    refused = _refusal(mode, cores, available, world_size, threads_per_worker, cores_per_worker, off_reason)
    if refused is not None:
        return refused
    notes: list[str] = []
    for topo, local in _attempts(topology, near):
        physical = _physical_cores(available, topo)
        groups = _locality_groups(physical, world_size, local)
        assigned = _blocks(groups, world_size, cores_per_worker) if groups else None
        if assigned is not None:
            break
        notes.append(_fallback_note(topo, local))
    rank_cores, reserved = assigned
    spare = _spare(physical, reserved, rank_cores)
    return AffinityPlan(
        mode=mode,
        pinned=True,
        available_cores=available,
        rank_cores=rank_cores,
        parent_cores=spare,
        reason=_pinned_reason(world_size, len(rank_cores[0]), threads_per_worker, physical, local, notes, spare),
    )


def plan_for_host(
    *,
    mode: str,
    device: str,
    world_size: int,
    threads_per_worker: int,
    cores_per_worker: int | None = None,
    off_reason: str | None = None,
    environ: Mapping[str, str],
) -> AffinityPlan:
    """The plan for ``world_size`` ranks on this host: the cores this process may use, their SMT
    siblings and, on CUDA, the CPUs near each rank's GPU (read only when there is something to pin)."""
    cores = current_cores() if pinning_supported() else None
    pinning = mode != "off" and cores is not None
    return plan_affinity(
        mode=mode,
        cores=cores,
        world_size=world_size,
        threads_per_worker=threads_per_worker,
        cores_per_worker=cores_per_worker,
        off_reason=off_reason,
        topology=read_topology() if pinning else None,
        near=gpu_local_cpus(world_size, environ) if pinning and device == "cuda" else None,
    )


def _refusal(
    mode: str,
    cores: Sequence[int] | None,
    available: tuple[int, ...],
    world_size: int,
    threads_per_worker: int,
    cores_per_worker: int | None,
    off_reason: str | None,
) -> AffinityPlan | None:
    """The plan that pins nothing, with why, or None when there are cores enough to pin."""

    def unpinned(reason: str) -> AffinityPlan:
        return AffinityPlan(mode=mode, pinned=False, reason=reason, available_cores=available)

    n = len(available)
    if mode == "off":
        return unpinned(off_reason or "pinning off")
    if cores is None:
        return unpinned(f"os.sched_setaffinity is not available on this platform ({sys.platform})")
    if n < world_size:
        return unpinned(f"fewer cores ({n}) than ranks ({world_size}): left to the OS scheduler")
    if cores_per_worker is None and world_size * threads_per_worker > n:
        return unpinned(
            f"{world_size} rank(s) x {threads_per_worker} thread(s) > {n} cores (oversubscribed): "
            "left to the OS scheduler"
        )
    if cores_per_worker is not None and world_size * cores_per_worker > n:
        return unpinned(f"{world_size} rank(s) x {cores_per_worker} core(s) > {n} cores: left to the OS scheduler")
    return None


def _attempts(topology: CpuTopology | None, near: Sequence[Collection[int] | None] | None) -> list[tuple]:
    """What to plan with, best first: siblings and GPU locality, siblings alone, plain CPU numbers."""
    out = [(topology, near)]
    if near is not None:
        out.append((topology, None))
    if topology is not None:
        out.append((None, None))
    return out


def _fallback_note(topology: CpuTopology | None, near: Sequence[Collection[int] | None] | None) -> str:
    if near is not None:
        return "not on each GPU's NUMA node: its cores cannot hold its ranks' blocks"
    return "hyperthreads shared: too few physical cores for the blocks"


def _physical_cores(available: tuple[int, ...], topology: CpuTopology | None) -> list[tuple[int, ...]]:
    """The physical cores this process may use (each its usable siblings), by first CPU."""
    if topology is None:
        return [(c,) for c in available]
    usable = set(available)
    seen = {c for core in topology.cores for c in core}
    cores = [tuple(c for c in core if c in usable) for core in topology.cores]
    cores += [(c,) for c in available if c not in seen]  # a CPU the topology does not list: a core of its own
    return sorted((core for core in cores if core), key=lambda core: core[0])


def _locality_groups(
    physical: list[tuple[int, ...]], world_size: int, near: Sequence[Collection[int] | None] | None
) -> list[tuple[list[int], list[tuple[int, ...]]]] | None:
    """[(ranks, the physical cores they share)]: one group without locality, else one per GPU NUMA
    node (cores whose first usable CPU is near it); None when locality cannot be used."""
    if near is None:
        return [(list(range(world_size)), physical)]
    if len(near) < world_size or any(not n for n in near[:world_size]):
        return None
    groups: dict[frozenset[int], list[int]] = {}
    for rank in range(world_size):
        groups.setdefault(frozenset(near[rank]), []).append(rank)
    out, taken = [], set()
    for cpus, ranks in groups.items():
        mine = [core for core in physical if core[0] in cpus]
        if not mine or taken & set(mine):  # no usable core near the GPU, or nodes overlapping
            return None
        taken |= set(mine)
        out.append((ranks, mine))
    return out


def _blocks(
    groups: list[tuple[list[int], list[tuple[int, ...]]]], world_size: int, cores_per_worker: int | None
) -> tuple[tuple[tuple[int, ...], ...], list[tuple[int, ...]]] | None:
    """(each rank's CPUs, the physical cores reserved) or None when the groups cannot hold the blocks.

    Every rank gets the same number of physical cores, ``used``: its group's equal share, or
    ``cores_per_worker`` of them when that is fewer (one hyperthread of each). Its CPUs are the
    first threads of its cores, then their siblings, up to ``cores_per_worker`` (default: all of
    them, the same count for every rank)."""
    share = min(len(cores) // len(ranks) for ranks, cores in groups)
    if share == 0:
        return None
    used = share if cores_per_worker is None else min(cores_per_worker, share)
    picked: dict[int, list[int]] = {}
    reserved: list[tuple[int, ...]] = []
    for ranks, cores in groups:
        for i, rank in enumerate(ranks):
            mine = cores[i * used : (i + 1) * used]
            reserved += mine
            depth = max(len(core) for core in mine)
            picked[rank] = [core[t] for t in range(depth) for core in mine if t < len(core)]
    block = min(len(p) for p in picked.values()) if cores_per_worker is None else cores_per_worker
    if any(len(p) < block for p in picked.values()):
        return None
    return tuple(tuple(sorted(picked[r][:block])) for r in range(world_size)), reserved


def _spare(
    physical: list[tuple[int, ...]],
    reserved: list[tuple[int, ...]],
    rank_cores: tuple[tuple[int, ...], ...],
) -> tuple[int, ...] | None:
    """The parent's cores: whole physical cores no rank holds, else the siblings the ranks leave."""
    held = set(reserved)
    whole = tuple(sorted(c for core in physical if core not in held for c in core))
    pinned = {c for block in rank_cores for c in block}
    left = tuple(sorted(c for core in reserved for c in core if c not in pinned))
    return whole or left or None


def _pinned_reason(
    world_size: int,
    block: int,
    threads: int,
    physical: list[tuple[int, ...]],
    near: Sequence[Collection[int] | None] | None,
    notes: list[str],
    spare: tuple[int, ...] | None,
) -> str:
    text = f"{world_size} rank(s) x {block} core(s) each"
    if any(len(core) > 1 for core in physical):
        text += ", no physical core shared"
    if near is not None:
        text += ", each on its GPU's NUMA node"
    if notes:
        text += f" ({'; '.join(notes)})"
    if threads > block:
        text += f", {threads} thread(s) time-share them"
    if spare:
        return f"{text}; parent and sampler on the {len(spare)} spare core(s) {list(spare)}"
    return f"{text}; no spare core: the parent is not moved"


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
