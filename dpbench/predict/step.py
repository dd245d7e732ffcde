"""The step model: a :class:`~dpbench.predict.profile.StepProfile` and a
:class:`~dpbench.predict.collectives.CollectiveModel` → each strategy's step at another world size.

The step is the schedule the strategy declares (:class:`dpbench.strategies.StepSchedule`; this
module knows no strategy's name), replayed on a compute stream and one communication stream
(:func:`dpbench.predict.schedule.replay`):

- **flat buckets** (ddp, zero, allreduce): with a buffer broadcast and buffers, one broadcast of
  rank 0's buffers (``buffer_bytes``) that the first forward waits for; then the buckets
  all-reduced in the order they are ready, overlapping the rest of backward where the schedule
  overlaps (else every one after backward); the optimizer after the last one. With K
  micro-batches: each a forward and a backward of 1/K of the measured ones; the first K − 1 send
  nothing, the last one's backward all-reduces the buckets; the optimizer once. Under strong
  scaling the micro-batch shrinks with the per-rank batch, and a world size that leaves a rank
  fewer samples than K is refused, as ddp refuses it.
- **a sharded optimizer** (zero, fsdp): the optimizer steps 1/N of the parameters; **a partition
  broadcast** (zero): then every rank broadcasts its partition (N broadcasts of 1/N of the
  parameters).
- **sharded units** (fsdp): per unit an all-gather in forward, prefetched one unit ahead; in
  backward, when it reshards, a second all-gather (the next unit's prefetched when a unit's backward
  starts), and a reduce-scatter of the unit's gradients. With replica groups (HSDP,
  ``replicate=R``): the all-gather and reduce-scatter inside a shard group of N/R ranks, then an
  all-reduce of the shard across the R groups.

A run that does not record ``buffer_bytes`` (older runs) has no broadcast replayed.

Compute that overlaps a collective runs at ``1 − overlap_slowdown`` of its speed (see
:class:`OverlapSlowdown`: measured from the run where it has a multi-rank case of the schedule that
calibrates it). Forward and backward at another per-rank batch follow the profile's compute floor
(:mod:`dpbench.predict.compute`: ``floor + per sample × batch``, measured where the run has the
configuration at two per-rank batches, else linear and said so).

Each rank is predicted on a device of its own: a run whose ranks shared a GPU (two ranks
time-slicing one, no MPS) measured something else, so its step stands beside the prediction with
no error (:attr:`StepPrediction.error`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

from dpbench.errors import UsageError
from dpbench.predict.collectives import CollectiveModel
from dpbench.predict.compute import ComputeFloor, linear_compute
from dpbench.predict.model import INTER, INTRA, TierFit
from dpbench.predict.profile import StepProfile
from dpbench.predict.schedule import COMM, COMPUTE, Task, replay
from dpbench.strategies import BucketSync, ShardedUnits

__all__ = [
    "OverlapSlowdown",
    "ACCUMULATIONS",
    "SCALINGS",
    "StepPrediction",
    "needed_collectives",
    "predict_step",
    "stated_overlap",
    "step_tasks",
    "with_derived_collectives",
]

SCALINGS = ("weak", "strong")
"""weak: the per-rank batch stays as measured; strong: the global batch stays as measured."""
ACCUMULATIONS = ("count", "micro-batch")
"""Under strong scaling with accumulation: count keeps the measured micro-batches per step (each
shrinks with the per-rank batch); micro-batch keeps the measured micro-batch size (fewer per rank as
ranks grow, down to one)."""
_NO_FLOOR = "the profile states none (StepProfile.compute_floor)"

# A collective's time: (collective, bytes, group size, whether the group spans nodes) → seconds.
Send = Callable[[str, float, int, bool], float]


@dataclass(kw_only=True, frozen=True)
class OverlapSlowdown:
    """How much compute slows while a collective runs: it runs at ``1 − value`` of its speed."""

    value: float
    """0: perfect overlap; 1: compute stops while a collective runs."""
    origin: str
    """Where it came from: measured (which case) or stated (and why)."""


def stated_overlap(device_type: str) -> OverlapSlowdown:
    """The slowdown used where the run measures none (no ddp case at two ranks or more)."""
    if device_type == "cpu":
        return OverlapSlowdown(
            value=1.0,
            origin="stated, not measured in this run: on CPU each rank's collectives run on its own cores, "
            "so compute stops while one runs (1)",
        )
    return OverlapSlowdown(
        value=0.0,
        origin="stated, not measured in this run (no ddp case at 2+ ranks): perfect overlap (0); "
        "give --overlap-slowdown to state another",
    )


@dataclass(kw_only=True, frozen=True)
class StepPrediction:
    """One strategy configuration's predicted step at one world size."""

    workload: str
    """The workload spec."""
    label: str
    """The strategy with the options the case set."""
    strategy: str
    """The strategy."""
    world_size: int
    """Ranks."""
    nodes: int
    """Nodes at the collective model's GPUs per node."""
    per_rank_batch: float
    """Samples per rank per step."""
    global_batch: float
    """Samples per step."""
    step_time_s: float
    """The predicted step, s."""
    lo_s: float
    """Its 95% interval's lower end: the measured step's trial interval and the collectives' together."""
    hi_s: float
    """Its upper end."""
    compute_s: float
    """The step with nothing sent (forward + backward + optimizer at this batch and shard), s."""
    comm_s: float
    """Every collective of the step back to back, s."""
    samples_per_s: float
    """``global_batch / step_time_s``."""
    scaling_efficiency: float
    """samples/s ÷ (world size × one rank's samples/s): weak, at the same per-rank batch; strong,
    one rank taking the whole global batch."""
    memory_per_rank_bytes: int | None = None
    """The estimator's bytes per rank (see :attr:`StepForecast.memory`; None: not estimated)."""
    measured_step_time_s: float | None = None
    """The run's own measurement at this world size, if it has one."""
    measured_ranks_per_device: int | None = None
    """The most ranks that shared one GPU in that measurement (2: time-sliced; None: CPU or not recorded)."""
    compute_floor: ComputeFloor = dataclasses.field(default_factory=lambda: linear_compute(_NO_FLOOR))
    """How forward + backward were scaled to ``per_rank_batch`` (measured, or stated linear)."""
    micro_batches: int = 1
    """Micro-batches per step at this world size (accumulation)."""

    @property
    def exposed_comm_s(self) -> float:
        """Step − compute-only step (as ``extra_info.exposed_comm_s``), s."""
        return max(0.0, self.step_time_s - self.compute_s)

    @property
    def measured_on_shared_device(self) -> bool:
        """Whether the measurement's ranks shared a GPU: not the device per rank predicted."""
        return (self.measured_ranks_per_device or 1) > 1

    @property
    def error(self) -> float | None:
        """(predicted − measured) / measured; None without a measurement, or where its ranks shared a
        GPU (time-sliced: not what the model predicts, so no check of it)."""
        m = self.measured_step_time_s
        return None if m is None or self.measured_on_shared_device else self.step_time_s / m - 1.0


def needed_collectives(profile: StepProfile) -> tuple[str, ...]:
    """The collectives the profile's schedule issues (a buffer broadcast only where there are buffers)."""
    return profile.schedule.collectives(buffer_bytes=profile.buffer_bytes)


def with_derived_collectives(model: CollectiveModel) -> CollectiveModel:
    """``model`` plus all_gather and reduce_scatter taken from its all_reduce fit where they were not
    measured (a ring all-reduce is a reduce-scatter then an all-gather: the same bus bandwidth and
    hop latency); the notes say so. dpbench's comm suite measures all_reduce and broadcast only.

    On NCCL the bus bandwidth taken is at most broadcast's in the same tier: on NVSwitch nodes NCCL's
    all_reduce may run NVLS, which reduces in the switch and moves less through each GPU's link than
    a ring, so its bus bandwidth can exceed the link's; an all-gather or a reduce-scatter moves
    (n − 1)/n of the data through each GPU's link whatever the algorithm, as a broadcast moves all of
    it. Without a broadcast fit the notes say they may be predicted too fast."""
    have = {(t.collective, t.tier) for t in model.tiers}
    nccl = "nccl" in model.backends
    added: list[TierFit] = []
    capped: set[str] = set()  # tiers whose derived bandwidth is broadcast's
    unbounded: set[str] = set()  # NCCL tiers with no broadcast to bound it
    for fit in model.tiers:
        if fit.collective != "all_reduce":
            continue
        ring = next((t for t in model.tiers if t.collective == "broadcast" and t.tier == fit.tier), None)
        for name in ("all_gather", "reduce_scatter"):
            if (name, fit.tier) in have:
                continue
            derived = dataclasses.replace(
                fit, collective=name, origin=f"all_reduce's {fit.tier} tier ({fit.origin}), as a ring's half"
            )
            if nccl and ring is None:
                unbounded.add(fit.tier)
            elif nccl and ring.busbw_gbps < fit.busbw_gbps:
                derived = _ring_bandwidth(derived, ring)
                capped.add(fit.tier)
            added.append(derived)
    if not added:
        return model
    names = sorted({t.collective for t in added})
    note = f"{' and '.join(names)} not measured: taken from the all_reduce fit (a ring all-reduce is both)"
    if capped:
        note += (
            f"; on NCCL at broadcast's bus bandwidth, lower ({', '.join(sorted(capped))} tier): NCCL's all_reduce "
            "may run NVLS on NVSwitch nodes, faster than all_gather and reduce_scatter can be"
        )
    if unbounded:
        note += (
            f"; assumed as fast as NCCL's all_reduce ({', '.join(sorted(unbounded))} tier): on NVSwitch nodes it "
            "may run NVLS, which they cannot, and they are predicted too fast — measure them (nccl-tests' "
            "all_gather_perf, reduce_scatter_perf in --collectives)"
        )
    return dataclasses.replace(model, tiers=model.tiers + tuple(added), notes=model.notes + (note,))


def _ring_bandwidth(derived: TierFit, ring: TierFit) -> TierFit:
    """``derived`` (from all_reduce) with ``ring``'s (broadcast's) bus bandwidth and its interval."""
    logs = derived.log_params[:-1] + (math.log(ring.busbw_gbps),) if derived.log_params else ()
    return dataclasses.replace(
        derived,
        busbw_gbps=ring.busbw_gbps,
        busbw_interval=ring.busbw_interval,
        log_params=logs,
        origin=f"{derived.origin}; broadcast's bus bandwidth ({ring.origin})",
    )


def _sender(model: CollectiveModel, bound: str) -> Send:
    def send(collective: str, nbytes: float, group: int, spans: bool) -> float:
        if group <= 1 or nbytes <= 0:
            return 0.0
        want = INTER if spans else INTRA
        fit = next((t for t in model.tiers if t.collective == collective and t.tier == want), None)
        if fit is None:  # the model's own one-line refusal, naming --link
            fit = model.tier(collective, group if not spans else max(group, model.gpus_per_node + 1))
        if bound == "mid":
            return fit.time_us(nbytes, group) / 1e6
        lo, hi = fit.interval_us(nbytes, group)
        return (lo if bound == "lo" else hi) / 1e6

    return send


def _buffer_broadcast(p: StepProfile, *, send: Send, world: int, spans: bool) -> list[Task]:
    """DDP's buffer sync: one coalesced broadcast of rank 0's buffers before the step's first forward
    (none at one rank, with ``broadcast_buffers`` off, or without buffers)."""
    if world <= 1 or not p.broadcasts_buffers or not p.buffer_bytes:
        return []
    return [Task(name="broadcast buffers", seconds=send("broadcast", p.buffer_bytes, world, spans))]


def _bucket_tasks(
    p: StepProfile,
    sync: BucketSync,
    *,
    forward: float,
    backward: float,
    send: Send,
    world: int,
    spans: bool,
    micro_batches: int | None = None,
) -> tuple[list[Task], list[Task]]:
    """The buffers' broadcast, then forward and backward per micro-batch, the last one's backward cut at
    each bucket's ready point when ``overlap``, and the buckets' all-reduces (in the last backward only:
    the micro-batches before it run under ``no_sync()``)."""
    comm = _buffer_broadcast(p, send=send, world=world, spans=spans)
    # DDP's buffer sync is synchronous: the first forward starts when the broadcast has ended
    synced = ((COMM, 0),) if comm else ()
    micro = micro_batches or p.accumulation_steps
    compute = []
    for m in range(micro - 1):
        compute.append(
            Task(name=f"forward micro-batch {m}", seconds=forward / micro, after_end=synced if m == 0 else ())
        )
        compute.append(Task(name=f"backward micro-batch {m}", seconds=backward / micro))
    last = "forward" if micro == 1 else f"forward micro-batch {micro - 1}"
    compute.append(Task(name=last, seconds=forward / micro, after_end=synced if micro == 1 else ()))
    backward /= micro  # the last micro-batch's: the one whose gradients are all-reduced
    if sync.overlap:
        done = 0.0
        for i, b in enumerate(p.buckets):
            compute.append(Task(name=f"backward to bucket {i}", seconds=backward * (b.ready_fraction - done)))
            done = b.ready_fraction
            comm.append(
                Task(
                    name=f"all_reduce bucket {i}",
                    seconds=send("all_reduce", b.bytes, world, spans),
                    after_end=((COMPUTE, len(compute) - 1),),
                )
            )
        if done < 1.0 or not p.buckets:
            compute.append(Task(name="backward", seconds=backward * (1.0 - done)))
    else:
        compute.append(Task(name="backward", seconds=backward))
        comm += [
            Task(
                name=f"all_reduce bucket {i}",
                seconds=send("all_reduce", b.bytes, world, spans),
                after_end=((COMPUTE, len(compute) - 1),),
            )
            for i, b in enumerate(p.buckets)
        ]
    return compute, comm


def _unit_tasks(
    p: StepProfile,
    sync: ShardedUnits,
    *,
    forward: float,
    backward: float,
    send: Send,
    world: int,
    spans: bool,
    gpus_per_node: int,
) -> tuple[list[Task], list[Task]]:
    replicate = sync.replicate if world > 1 else 1  # one rank: nothing to replicate
    if world % replicate:
        raise UsageError(
            f"--world-sizes: {world}: {p.strategy} option replicate={replicate} (HSDP) must divide the world size, "
            f"found {world} % {replicate} = {world % replicate}"
        )
    shard = world // replicate
    shard_spans = shard > gpus_per_node
    again = sync.gathers_in_backward
    units = p.units or ()
    k = len(units)
    total = sum(u.bytes for u in units) or 1
    compute = [Task(name=f"forward unit {i}", seconds=forward * u.bytes / total) for i, u in enumerate(units)]
    comm = [
        Task(
            name=f"all_gather unit {i}",
            seconds=send("all_gather", u.bytes, shard, shard_spans),
            after_start=((COMPUTE, i - 1),) if i else (),
        )
        for i, u in enumerate(units)
    ]
    for i in range(k):
        compute[i] = dataclasses.replace(compute[i], after_end=((COMM, i),))
    gathered: dict[int, int] = {}  # unit → index of its backward all-gather
    if again and k:
        gathered[k - 1] = len(comm)
        comm.append(
            Task(
                name=f"all_gather unit {k - 1} (backward)",
                seconds=send("all_gather", units[-1].bytes, shard, shard_spans),
                after_end=((COMPUTE, k - 1),),
            )
        )
    for j in range(k):
        u = k - 1 - j
        me = len(compute)
        compute.append(
            Task(
                name=f"backward unit {u}",
                seconds=backward * units[u].bytes / total,
                after_end=((COMM, gathered[u]),) if u in gathered else (),
            )
        )
        if again and u > 0:
            gathered[u - 1] = len(comm)
            comm.append(
                Task(
                    name=f"all_gather unit {u - 1} (backward)",
                    seconds=send("all_gather", units[u - 1].bytes, shard, shard_spans),
                    after_start=((COMPUTE, me),),
                )
            )
        comm.append(
            Task(
                name=f"reduce_scatter unit {u}",
                seconds=send("reduce_scatter", units[u].bytes, shard, shard_spans),
                after_end=((COMPUTE, me),),
            )
        )
        if replicate > 1:
            comm.append(
                Task(
                    name=f"all_reduce unit {u} across replicas",
                    seconds=send("all_reduce", units[u].bytes / shard, replicate, spans),
                )
            )
    return compute, comm


def step_tasks(
    p: StepProfile,
    *,
    world_size: int,
    batch_scale: float,
    send: Send,
    gpus_per_node: int,
    thread_scale: float = 1.0,
    micro_batches: int | None = None,
) -> tuple[list[Task], list[Task], float]:
    """The profile's step at ``world_size`` as tasks on the two streams, and its compute alone, s;
    ``batch_scale`` multiplies forward and backward (the per-rank batch's change), ``thread_scale``
    every compute phase (fewer threads per rank: more than 1); ``micro_batches``: the step's
    micro-batches where they differ from the profile's (accumulation with the micro-batch fixed)."""
    schedule = p.schedule
    forward, backward = p.forward_s * batch_scale * thread_scale, p.backward_s * batch_scale * thread_scale
    optimizer = p.optimizer_s * (p.world_size / world_size if schedule.sharded_optimizer else 1.0) * thread_scale
    spans = world_size > gpus_per_node
    sync = schedule.gradients
    if isinstance(sync, ShardedUnits):
        compute, comm = _unit_tasks(
            p,
            sync,
            forward=forward,
            backward=backward,
            send=send,
            world=world_size,
            spans=spans,
            gpus_per_node=gpus_per_node,
        )
    else:
        compute, comm = _bucket_tasks(
            p,
            sync,
            forward=forward,
            backward=backward,
            send=send,
            world=world_size,
            spans=spans,
            micro_batches=micro_batches,
        )
    compute.append(Task(name="optimizer", seconds=optimizer, after_end=((COMM, len(comm) - 1),) if comm else ()))
    if schedule.partition_broadcast:  # each rank broadcasts its partition after its step
        part = p.param_bytes / world_size
        comm += [
            Task(
                name=f"broadcast partition {r}",
                seconds=send("broadcast", part, world_size, spans),
                after_end=((COMPUTE, len(compute) - 1),),
            )
            for r in range(world_size if world_size > 1 else 0)
        ]
    return compute, comm, forward + backward + optimizer


def _batch(p: StepProfile, world_size: int, scaling: str, accumulation: str = "count") -> tuple[float, float, int]:
    """(per-rank batch, global batch, micro-batches per step) at ``world_size``."""
    if scaling not in SCALINGS:
        raise UsageError(f"--scaling: expected one of {', '.join(SCALINGS)}, found {scaling!r}")
    if accumulation not in ACCUMULATIONS:
        raise UsageError(f"--accumulation: expected one of {', '.join(ACCUMULATIONS)}, found {accumulation!r}")
    micro = p.accumulation_steps
    if scaling == "weak":
        return float(p.per_rank_batch), float(p.per_rank_batch * world_size), micro
    total = p.per_rank_batch * p.world_size
    if total < world_size:
        raise UsageError(
            f"--world-sizes: {world_size}: strong scaling keeps the measured global batch of {total}, "
            f"which cannot give every one of {world_size} ranks a sample"
        )
    if accumulation == "micro-batch" and micro > 1:
        return total / world_size, float(total), _fixed_micro_batch(p, world_size, total)
    if total // world_size < micro:  # ddp's own check: every rank's slice holds a sample per micro-batch
        raise UsageError(
            f"--world-sizes: {world_size}: {p.strategy} option accumulation_steps={micro} expects at least "
            f"{micro} samples per rank, found {total // world_size} (strong scaling splits the measured "
            f"global batch of {total}); --accumulation micro-batch keeps the micro-batch instead"
        )
    return total / world_size, float(total), micro


def _fixed_micro_batch(p: StepProfile, world_size: int, total: int) -> int:
    """The micro-batches per rank that keep the measured micro-batch at ``world_size`` (fewer as ranks
    grow, as Megatron and most training scripts scale); a UsageError where the batch cannot split so."""
    micro = p.accumulation_steps
    size, left = divmod(p.per_rank_batch, micro)
    if left:
        raise UsageError(
            f"--accumulation micro-batch: {p.label}'s {p.per_rank_batch} samples per rank in {micro} micro-batches "
            "are not one micro-batch size: expected a per-rank batch that accumulation_steps divides"
        )
    if total % (world_size * size):
        raise UsageError(
            f"--world-sizes: {world_size}: the measured global batch of {total} cannot split into micro-batches of "
            f"{size} on every one of {world_size} ranks (--accumulation micro-batch): expected a world size that "
            f"divides {total // size}"
        )
    return total // (world_size * size)


def _floor(p: StepProfile) -> ComputeFloor:
    return p.compute_floor or linear_compute(_NO_FLOOR)


def _step_s(
    p: StepProfile,
    model: CollectiveModel,
    world_size: int,
    per_rank: float,
    bound: str,
    slowdown: float,
    thread_scale: float = 1.0,
    micro_batches: int | None = None,
) -> tuple[float, float, float]:
    """(step, compute alone, collectives back to back) in seconds at one bound of the intervals."""
    send = _sender(model, bound)
    scale = {"mid": 1.0, "lo": p.spread[0], "hi": p.spread[1]}[bound]
    compute, comm, alone = step_tasks(
        p,
        world_size=world_size,
        batch_scale=_floor(p).scale(p.per_rank_batch, per_rank),
        send=send,
        gpus_per_node=model.gpus_per_node,
        thread_scale=thread_scale,
        micro_batches=micro_batches,
    )
    compute = [dataclasses.replace(t, seconds=t.seconds * scale) for t in compute]
    done = replay(compute, comm, overlap_slowdown=slowdown)
    return done.end_s, alone * scale, sum(t.seconds for t in comm)


def predict_step(
    profile: StepProfile,
    model: CollectiveModel,
    world_size: int,
    *,
    overlap: OverlapSlowdown,
    scaling: str = "weak",
    memory_per_rank_bytes: int | None = None,
    measured_step_time_s: float | None = None,
    measured_ranks_per_device: int | None = None,
    threads_per_rank: int | None = None,
    accumulation: str = "count",
) -> StepPrediction:
    """``profile``'s step at ``world_size`` (see the module doc), with its 95% interval.

    ``measured_ranks_per_device``: the most ranks that shared one GPU in ``measured_step_time_s``
    (2+: it stands beside the prediction with no error).

    ``threads_per_rank``: the CPU threads each rank will compute with, where it differs from the
    profile's (ranks sharing one host's cores): compute scales as measured threads ÷ these (linear:
    no part of a step is taken to be serial). The one-rank reference of the efficiency keeps the
    profile's threads.

    ``accumulation`` (strong scaling with micro-batches): ``count`` keeps the measured micro-batches
    per step, ``micro-batch`` the measured micro-batch size (see :data:`ACCUMULATIONS`)."""
    if world_size < 1:
        raise UsageError(f"--world-sizes: expected positive integers, found {world_size}")
    if threads_per_rank is not None and threads_per_rank < 1:
        raise UsageError(f"--threads-per-rank: expected a positive integer, found {threads_per_rank}")
    threads = profile.threads_per_rank / threads_per_rank if threads_per_rank and profile.threads_per_rank else 1.0
    per_rank, global_batch, micro = _batch(profile, world_size, scaling, accumulation)
    step, compute, comm = _step_s(profile, model, world_size, per_rank, "mid", overlap.value, threads, micro)
    lo = _step_s(profile, model, world_size, per_rank, "lo", overlap.value, threads, micro)[0]
    hi = _step_s(profile, model, world_size, per_rank, "hi", overlap.value, threads, micro)[0]
    one_rank = per_rank if scaling == "weak" else global_batch
    _, _, one_micro = _batch(profile, 1, scaling, accumulation)
    alone = _step_s(profile, model, 1, one_rank, "mid", overlap.value, micro_batches=one_micro)[0]
    samples = global_batch / step
    return StepPrediction(
        workload=profile.workload,
        label=profile.label,
        strategy=profile.strategy,
        world_size=world_size,
        nodes=math.ceil(world_size / model.gpus_per_node),
        per_rank_batch=per_rank,
        global_batch=global_batch,
        step_time_s=step,
        lo_s=min(lo, step),
        hi_s=max(hi, step),
        compute_s=compute,
        comm_s=comm,
        samples_per_s=samples,
        scaling_efficiency=samples / (world_size * one_rank / alone),
        memory_per_rank_bytes=memory_per_rank_bytes,
        measured_step_time_s=measured_step_time_s,
        measured_ranks_per_device=measured_ranks_per_device,
        compute_floor=_floor(profile),
        micro_batches=micro,
    )
