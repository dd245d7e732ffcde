"""A step profile: what one strategy's step on one workload costs per phase, and what it sends,
read from a saved dpbench run (or built by hand by a study that measured it elsewhere).

From a training benchmark's ``extra_info`` (schema 2):

- **compute per phase** (``phases``: ``forward``, ``backward``, ``optimizer``; allreduce's
  ``compute``, ``communication``, ``optimizer``), scaled so that they add up to the step's
  compute: the whole measured step at world size 1 (nothing to send: its local copies are compute),
  else the compute-only step (``compute_only_step_s``, the same rank's step with gradient sync off);
- **the schedule**: what the strategy declares one step issues for the case's resolved options
  (:func:`dpbench.strategies.step_schedule`: its buckets or units, micro-batches, broadcasts, what
  it shards); a strategy that declares none is not predicted;
- **gradient groups**: the parameter bytes (``parameter_count``, fp32) cut as the schedule cuts
  them — flat buckets (a first bucket's cap, then the others'), or sharded units
  (``shard_units.count`` of equal size). A run does not record each parameter's size, so a
  bucket's edge may fall inside a parameter; each group is ready when the backward has produced its
  share of the bytes;
- **the buffer bytes** (``buffer_bytes``): what a schedule's buffer broadcast sends before a step's
  first forward; absent from older runs, where no broadcast is modelled;
- **the trial spread**: the measured step's 95% interval over trials (``step_time_ci95``), as
  ratios to its median;
- **ranks sharing a GPU**: the most ranks that ran on one GPU (the sampler's ``rank_devices``,
  ``{"cuda:0": [0, 1]}``): two ranks on one GPU time-slice it (no MPS), so their compute is not one
  GPU's each;
- **the compute floor** (:mod:`~dpbench.predict.compute`): forward + backward fitted as ``floor +
  per sample × batch`` over the run's cases of the same configuration at two per-rank batches or
  more on the same resources per rank (device, threads, ranks per GPU); else stated, linear.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from dpbench.errors import UsageError
from dpbench.predict.compute import ComputeFloor, fit_floor, linear_compute
from dpbench.strategies import BucketSync, StepSchedule, scheduled_strategies, step_schedule

__all__ = [
    "GradientGroup",
    "buckets_from_sizes",
    "case_label",
    "StepProfile",
    "fit_compute_floor",
    "gradient_groups",
    "profile_from_benchmark",
    "profiles_from_run",
    "gpu_sharing",
]

_PARAM_BYTES = 4  # parameters and gradients are fp32 (precision is autocast)
_RECORDED_BY = "the scaling, throughput or sharding suite (dpbench run --suites scaling)"


@dataclass(kw_only=True, frozen=True)
class GradientGroup:
    """Gradients sent together: one flat bucket, or one sharded unit."""

    bytes: int
    """Bytes of the group (a sharded unit's whole parameters: what its all-gather assembles)."""
    ready_fraction: float
    """The share of the backward done when the group's last gradient is ready (1: at its end)."""


@dataclass(kw_only=True, frozen=True)
class StepProfile:
    """One strategy's step on one workload at the per-rank batch it was measured at."""

    workload: str
    """The workload spec (``mlp``, ``hf:gpt2@n_layer=2``)."""
    strategy: str
    """The strategy measured (``ddp``, ``fsdp``, ``zero``, ``allreduce``)."""
    label: str
    """The strategy with the options the case set: ``fsdp@reshard_after_forward=False``."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """Every resolved strategy option the case ran with."""
    world_size: int
    """Ranks it was measured at."""
    per_rank_batch: int
    """Samples per rank per step."""
    forward_s: float
    """Forward compute per step at ``per_rank_batch``, s."""
    backward_s: float
    """Backward compute per step, s."""
    optimizer_s: float
    """The optimizer step (of this rank's share at ``world_size``), s."""
    param_bytes: int
    """The model's parameter bytes (whole, unsharded)."""
    buckets: tuple[GradientGroup, ...] = ()
    """The schedule's flat gradient buckets in the order they are ready (empty for sharded units)."""
    units: tuple[GradientGroup, ...] = ()
    """The schedule's sharded units in forward order (empty for buckets)."""
    step_time_s: float
    """The measured step, s (the median over trials)."""
    spread: tuple[float, float] = (1.0, 1.0)
    """The measured step's 95% interval over trials as ratios to its median (1, 1: one trial)."""
    device_type: str = "cpu"
    """Where it ran: ``cpu`` or ``cuda``."""
    threads_per_rank: int | None = None
    """torch intra-op threads each rank computed with (``threads_per_worker``; None: not recorded)."""
    origin: str = ""
    """Where it came from: the run and the case."""
    buffer_bytes: int | None = None
    """Bytes of the model's buffers (BatchNorm statistics; 0: none; None: not recorded)."""
    ranks_per_device: int | None = None
    """The most ranks that ran on one GPU (2: two ranks time-sliced it); None: CPU, or not recorded."""
    compute_floor: ComputeFloor | None = None
    """How forward + backward grow with the per-rank batch (None: linearly, no floor given)."""
    stated: tuple[str, ...] = ()
    """What the profile assumes where its measurement said nothing, one line each (``backward = 2 ×
    forward (assumed)``); empty for a saved run's case, which records every phase."""

    @property
    def compute_s(self) -> float:
        """Forward + backward + optimizer, s: the step with nothing sent."""
        return self.forward_s + self.backward_s + self.optimizer_s

    @cached_property
    def schedule(self) -> StepSchedule:
        """What the strategy declares one step issues with these options (see :mod:`dpbench.strategies.schedule`)."""
        found = step_schedule(self.strategy, self.options)
        if found is None:
            raise UsageError(
                f"{self.origin or self.label}: expected one of {', '.join(scheduled_strategies())}, "
                f"found {self.strategy!r}"
            )
        return found

    @property
    def accumulation_steps(self) -> int:
        """Micro-batches per step (all but the last send nothing)."""
        return self.schedule.micro_batches

    @property
    def broadcasts_buffers(self) -> bool:
        """Whether the strategy broadcasts rank 0's buffers before each step's first forward."""
        return self.schedule.buffer_broadcast


def gradient_groups(total_bytes: int, *, first_bytes: int | None, cap_bytes: int) -> tuple[GradientGroup, ...]:
    """``total_bytes`` cut into buckets in ready order: ``first_bytes`` first (DDP's small first
    bucket; None: none), then ``cap_bytes`` each; each ready when its bytes' backward is done."""
    if total_bytes <= 0 or cap_bytes <= 0:
        return ()
    sizes = []
    left = total_bytes
    if first_bytes:
        sizes.append(min(first_bytes, left))
        left -= sizes[-1]
    while left > 0:
        sizes.append(min(cap_bytes, left))
        left -= sizes[-1]
    out, done = [], 0
    for size in sizes:
        done += size
        out.append(GradientGroup(bytes=size, ready_fraction=done / total_bytes))
    return tuple(out)


def buckets_from_sizes(sizes: Sequence[int], *, first_bytes: int | None, cap_bytes: int) -> tuple[GradientGroup, ...]:
    """Parameters' bytes in the order backward makes their gradients ready, cut into buckets as
    DDP's reducer cuts them once it has seen a step (``dpbench.strategies.ddp.ddp_collectives``): a
    bucket closes before the parameter that would take it past its cap (``first_bytes`` for the
    first, ``cap_bytes`` after); each ready when the backward has produced its share of the bytes."""
    total = sum(sizes)
    if total <= 0 or cap_bytes <= 0:
        return ()
    cut: list[int] = []
    size = 0
    for nbytes in sizes:
        limit = (first_bytes or cap_bytes) if not cut else cap_bytes
        if size and size + nbytes > limit:
            cut.append(size)
            size = 0
        size += nbytes
    if size:
        cut.append(size)
    out, done = [], 0
    for size in cut:
        done += size
        out.append(GradientGroup(bytes=size, ready_fraction=done / total))
    return tuple(out)


def case_label(strategy: str, requested: Mapping[str, Any]) -> str:
    """The strategy with the options a case set: ``fsdp@reshard_after_forward=False``."""
    if not requested:
        return strategy
    return strategy + "@" + ",".join(f"{k}={v}" for k, v in sorted(requested.items()))


def _phase_split(info: Mapping[str, Any], fused: bool, where: str) -> tuple[float, float, float]:
    """(forward, backward, optimizer) shares from ``phases``; a UsageError naming what records them.
    ``fused``: forward and backward timed as one phase (``compute``), split 1:2 here."""
    phases = info.get("phases") or {}
    if fused:
        if not all(isinstance(phases.get(k), (int, float)) for k in ("compute", "optimizer")):
            raise UsageError(
                f"{where}: no phase timings (extra_info.phases compute, optimizer): expected {_RECORDED_BY}"
            )
        compute = float(phases["compute"])
        return compute / 3.0, compute * 2.0 / 3.0, float(phases["optimizer"])
    names = ("forward", "backward", "optimizer")
    if not all(isinstance(phases.get(k), (int, float)) for k in names):
        raise UsageError(
            f"{where}: no phase timings (extra_info.phases forward, backward, optimizer): expected {_RECORDED_BY}"
        )
    return tuple(float(phases[k]) for k in names)  # type: ignore[return-value]


def _compute_total(info: Mapping[str, Any], world: int, where: str) -> float:
    if world == 1:
        return float(info["step_time_s"])
    only = info.get("compute_only_step_s")
    if isinstance(only, (int, float)) and only > 0:
        return float(only)
    phases = info.get("phases") or {}
    if "communication" in phases:  # allreduce: its phases keep the sync apart
        return float(phases.get("compute", 0.0)) + float(phases.get("optimizer", 0.0))
    raise UsageError(
        f"{where}: measured at world size {world} without its compute-only step (extra_info.compute_only_step_s): "
        f"expected a case at world size 1, or {_RECORDED_BY}"
    )


def _groups(schedule: StepSchedule, info: Mapping[str, Any], param_bytes: int) -> dict[str, Any]:
    sync = schedule.gradients
    if isinstance(sync, BucketSync):
        return {"buckets": gradient_groups(param_bytes, first_bytes=sync.first_bytes, cap_bytes=sync.cap_bytes)}
    units = info.get("shard_units") or {}
    count = max(1, int(units.get("count") or 1))
    sizes = [param_bytes // count] * count
    sizes[-1] += param_bytes - sum(sizes)
    done, out = 0, []
    for size in sizes:
        done += size
        out.append(GradientGroup(bytes=size, ready_fraction=done / param_bytes if param_bytes else 1.0))
    return {"units": tuple(out)}


def profile_from_benchmark(info: Mapping[str, Any], *, origin: str = "") -> StepProfile:
    """The step profile of one training benchmark's ``extra_info``."""
    strategy = str(info.get("strategy"))
    world = int(info.get("world_size") or 1)
    label = case_label(strategy, info.get("requested_options") or {})
    where = f"{origin or 'run'}: {label} {info.get('workload_spec') or info.get('workload')} w{world}"
    options = dict(info.get("options") or {})
    schedule = step_schedule(strategy, options)
    if schedule is None:
        raise UsageError(f"{where}: expected one of {', '.join(scheduled_strategies())}, found {strategy!r}")
    forward, backward, optimizer = _phase_split(info, schedule.fused_compute, where)
    total = _compute_total(info, world, where)
    scale = total / (forward + backward + optimizer) if forward + backward + optimizer > 0 else 0.0
    count = info.get("parameter_count") or (info.get("memory_estimate") or {}).get("parameter_count")
    if not count:
        raise UsageError(f"{where}: no parameter count (extra_info.parameter_count): expected a run of schema 2")
    param_bytes = int(count) * _PARAM_BYTES
    ci = info.get("step_time_ci95")
    step = float(info["step_time_s"])
    spread = (float(ci[0]) / step, float(ci[1]) / step) if ci and step > 0 else (1.0, 1.0)
    batches = info.get("per_replica_batch") or [int(info.get("global_batch") or 1) // world]
    return StepProfile(
        workload=str(info.get("workload_spec") or info.get("workload")),
        strategy=strategy,
        label=label,
        options=options,
        world_size=world,
        per_rank_batch=int(batches[0]),
        forward_s=forward * scale,
        backward_s=backward * scale,
        optimizer_s=optimizer * scale,
        param_bytes=param_bytes,
        step_time_s=step,
        spread=spread,
        device_type=str(info.get("device_type") or "cpu"),
        threads_per_rank=int(info["threads_per_worker"]) if info.get("threads_per_worker") else None,
        origin=where,
        buffer_bytes=int(info["buffer_bytes"]) if isinstance(info.get("buffer_bytes"), int) else None,
        ranks_per_device=gpu_sharing(info),
        **_groups(schedule, info, param_bytes),
    )


def gpu_sharing(info: Mapping[str, Any]) -> int | None:
    """The most ranks of a training case that ran on one GPU, from its sampler summary's
    ``rank_devices`` (``{"cuda:0": [0, 1]}``: 2); None where it lists no GPU (CPU, older runs)."""
    summaries = [info.get("sampler") or {}, *((info.get("trials") or {}).get("sampler") or [])]
    for summary in summaries:
        shared = summary.get("rank_devices") if isinstance(summary, Mapping) else None
        if isinstance(shared, Mapping) and shared:
            return max(len(ranks) for ranks in shared.values())
    return None


def _resources(p: StepProfile) -> tuple[str, int | None, int]:
    """What a rank computed on: the device type, its threads, the ranks that shared its GPU."""
    return p.device_type, p.threads_per_rank, p.ranks_per_device or 1


def _resources_text(p: StepProfile, like: StepProfile) -> str:
    """How ``p``'s resources per rank differ from ``like``'s, in words."""
    out = []
    if p.device_type != like.device_type:
        out.append(f"on {p.device_type}, not {like.device_type}")
    if p.threads_per_rank != like.threads_per_rank:
        out.append(f"{p.threads_per_rank} thread(s) per rank, not {like.threads_per_rank}")
    if (p.ranks_per_device or 1) != (like.ranks_per_device or 1):
        out.append(f"{p.ranks_per_device or 1} rank(s) per GPU, not {like.ranks_per_device or 1}")
    return ", ".join(out)


def fit_compute_floor(profile: StepProfile, cases: list[StepProfile]) -> ComputeFloor:
    """``profile``'s compute floor, fitted on ``cases`` (its configuration's cases in the run, itself
    included) that ran on the same resources per rank; stated (linear) where they give fewer than two
    per-rank batches, saying which cases were left out and why."""
    alike = [c for c in cases if _resources(c) == _resources(profile)]
    points = [(c.per_rank_batch, c.forward_s + c.backward_s) for c in alike]
    where = f"{profile.label} on {profile.workload}"
    at = ", ".join(f"w{c.world_size} ({c.per_rank_batch} per rank)" for c in sorted(alike, key=lambda c: c.world_size))
    fitted = fit_floor(points, origin=f"the run's {where} at {at}")
    if fitted is not None:
        return fitted
    others = sorted(
        {
            (c.world_size, c.per_rank_batch, _resources_text(c, profile))
            for c in cases
            if c.per_rank_batch != profile.per_rank_batch
        }
    )
    if not others:
        return linear_compute(f"the run measured {where} at one per-rank batch ({profile.per_rank_batch})")
    left = "; ".join(f"w{w} at {b}: {why}" for w, b, why in others)
    return linear_compute(f"{where}'s other per-rank batches ran on other resources per rank ({left})")


_SUITE_ORDER = ("scaling", "throughput", "sharding", "allreduce", "ddp_knobs")


def profiles_from_run(run: Any, *, world_size: int | None = None) -> list[StepProfile]:
    """One profile per workload and strategy configuration of a saved run (a ``dpbench.results.SavedRun``),
    from its smallest world size measured (or ``world_size``); the strategies that declare no step
    schedule (the in-process ones) are left out."""
    scheduled = scheduled_strategies()
    chosen: dict[tuple[str, str], tuple[int, int, Mapping[str, Any]]] = {}
    every: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for bench in run.benchmarks:
        info = bench.get("extra_info") or {}
        if info.get("kind") != "training" or info.get("strategy") not in scheduled:
            continue
        key = (
            str(info.get("workload_spec") or info.get("workload")),
            case_label(info["strategy"], info.get("requested_options") or {}),
        )
        every.setdefault(key, []).append(info)
        world = int(info.get("world_size") or 1)
        if world_size is not None and world != world_size:
            continue
        suite = info.get("suite")
        rank = (world, _SUITE_ORDER.index(suite) if suite in _SUITE_ORDER else len(_SUITE_ORDER))
        if key not in chosen or rank < chosen[key][:2]:
            chosen[key] = (*rank, info)
    if not chosen:
        at = f" at world size {world_size}" if world_size is not None else ""
        raise UsageError(
            f"{run.path}: no ddp, fsdp, zero or allreduce training case{at}: expected a run of {_RECORDED_BY}"
        )
    out = []
    for key in sorted(chosen):
        profile = profile_from_benchmark(chosen[key][2], origin=run.run_id)
        cases = [profile]
        for info in every[key]:
            if info is chosen[key][2]:
                continue
            try:
                cases.append(profile_from_benchmark(info, origin=run.run_id))
            except UsageError:  # a case without its phases or compute-only step gives no point
                continue
        out.append(replace(profile, compute_floor=fit_compute_floor(profile, cases)))
    return out
