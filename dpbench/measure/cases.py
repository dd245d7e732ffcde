"""The two kinds of benchmarked case and how one trial of each is measured.

A trial starts fresh workers, warms them up untimed, times ``profile.rounds`` rounds with the
resource sampler running, then times the control (:mod:`dpbench.launcher.control`) in the same workers.
Every time kept is measured in the workers, after device synchronisation; the parent's round
trip to them is never part of a number.
"""

from __future__ import annotations

import functools
import json
import math
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from dpbench.measure.trials import TrialResult

if TYPE_CHECKING:
    from dpbench.launcher.run_info import RunInfo
    from dpbench.launcher.step_stats import StepStats
    from dpbench.strategies.configs import StrategyConfig

__all__ = [
    "FINGERPRINT_LOSSES",
    "PROBE_STEPS",
    "TrainingCase",
    "TrainingDetail",
    "CollectiveCase",
    "CollectiveDetail",
    "GPU_MAX_STEPS_PER_ROUND",
    "GPU_WINDOW_MARGIN",
    "fingerprint_record",
    "steps_for_round",
    "steps_for_trial",
]

TimelinePath = Callable[[str], tuple[Any, str]]
# Every suite trains with this learning rate, so a case means the same thing in every suite.
LR = 0.05
# Untimed steps before the step count per round is chosen; the fingerprint's sums follow them.
PROBE_STEPS = 2
# Steps whose losses the fingerprint records (fewer when a trial runs fewer).
FINGERPRINT_LOSSES = 8
# On a GPU the timed rounds last this much more than the window NVML's readings need: a probe step a
# little slower than the timed ones, or a sampler that starts a few ms late, still leaves it long enough.
GPU_WINDOW_MARGIN = 1.25
# A bound on a GPU round's steps against a nonsense step time: no training step is under 25 µs (a few
# kernel launches), so 100,000 steps cover the 2.5 s window.
GPU_MAX_STEPS_PER_ROUND = 100_000


def steps_for_round(step_time: float, target_round_s: float, max_steps: int) -> int:
    """Steps per timed round so that one round lasts about ``target_round_s``."""
    if step_time <= 0 or not math.isfinite(step_time):
        return 1
    return max(1, min(max_steps, math.ceil(target_round_s / step_time)))


def steps_for_trial(*, probe_s: float, warm_s: float | None, profile: Any, device_type: str) -> int:
    """Steps per timed round of a trial on ``device_type``, from the probe's fastest step (``probe_s``)
    and the warm-up rounds' (``warm_s``; None before them).

    On CPU: :func:`steps_for_round` from the probe (the profile's round length and step cap; the
    warm-up rounds take the same steps). On a GPU the timed rounds together are the sampler's window,
    which must last :data:`GPU_WINDOW_MARGIN` × :func:`dpbench.sampler.energy.min_gpu_window_s` at the
    slowest interval the sampler may use (2.5 s at 0.25 s): five utilization readings inside NVML's 1 s
    averaging period and 20 energy-counter updates. So a round lasts ``window / rounds`` at least, no
    longer capped at the profile's 20 or 50 steps (at 0.5–3 ms a step that timed 0.01–0.15 s a round:
    0–3 readings), sized from the fastest step seen (the probe's pay for cuDNN autotuning and cuBLAS
    handles)."""
    if device_type != "cuda":
        return steps_for_round(probe_s, profile.target_round_s, profile.max_steps_per_round)
    from dpbench.sampler.base import SHARED_CORE_MIN_INTERVAL
    from dpbench.sampler.energy import min_gpu_window_s

    window = GPU_WINDOW_MARGIN * min_gpu_window_s(max(profile.sample_interval, SHARED_CORE_MIN_INTERVAL))
    target = max(profile.target_round_s, window / profile.rounds)
    fastest = min((t for t in (probe_s, warm_s) if t is not None and t > 0), default=probe_s)
    return steps_for_round(fastest, target, GPU_MAX_STEPS_PER_ROUND)


def fingerprint_record(sums: dict[str, Any], stats: list[StepStats]) -> dict[str, Any]:
    """``extra_info["fingerprint"]``: the global-batch loss of each of the trial's first
    :data:`FINGERPRINT_LOSSES` steps (the sums of every rank's weighted share: rank 0's reduced
    values, ``StepStats.losses``), in order from the first step, beside ``sums`` (:meth:`Run.fingerprint`,
    taken after ``sums["step"]`` steps). Every case starts from the same weights and batches, so
    step i's loss is comparable with single's at the same recipe (dpbench.results.fingerprint).
    ``skipped_steps``: which of those steps (from 1) a loss scaler skipped, the update of each
    (fp16 gradients with inf or NaN); the sums follow fewer of them."""
    losses = [float(x) for s in stats for x in s.losses][:FINGERPRINT_LOSSES]
    skipped, start = [], 0
    for s in stats:
        skipped += [start + i + 1 for i in s.skipped_steps if start + i < FINGERPRINT_LOSSES]
        start += s.steps
    return {"losses": losses, "skipped_steps": skipped, **sums}


def placement(*, device_type: Any, world_size: Any, nodes: Any, threads: Any, rank_cores: Any) -> str:
    """Which ranks, threads and cores a trial ran on, as JSON (the same fields the results' reader
    uses, dpbench.results.disturbed.placement): controls are compared within one placement."""
    return json.dumps([device_type, world_size, nodes, threads, rank_cores], default=str)


@dataclass(kw_only=True, frozen=True)
class TrainingDetail:
    """What one trial of a launched case (training, convergence) records beside its times
    (``TrialResult.detail``; the training extra_info is written from it)."""

    run_info: RunInfo
    """The trial's run: configuration as resolved, devices, nodes, workers (``Run.info``)."""
    step_stats: StepStats
    """The timed rounds' StepStats merged into one (phases, peak memory, losses, minor faults)."""
    trace: dict[str, Any] | None = None
    """The first trial's profiler traces (opt-in, :func:`dpbench.measure.tracing.trace_trial`); None when off."""
    energy: dict[str, Any] | None = None
    """The timed rounds' GPU energy (:func:`dpbench.measure.energy.trial_energy`; absent with why on CPU)."""


@dataclass(kw_only=True, frozen=True)
class CollectiveDetail:
    """What one trial of a collective case records beside its times: the pool it ran in."""

    backend: str | None
    """The process group's backend (``"gloo"``, ``"nccl"``)."""
    threads_per_worker: int
    """``torch.set_num_threads`` in every worker process."""
    world_size: int
    """Ranks taking part in the collective."""
    nodes: int
    """Nodes the ranks ran on (1 on one host)."""
    ranks_per_node: int
    """Ranks on each node (``world_size`` on one host)."""
    hosts: list[str]
    """Host name of each node."""


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", name)


def _sampled(pids: list[int], devices: list[str], profile: Any):
    """A sampler over the case's GPUs; ``devices`` is per rank (two ranks may share one GPU)."""
    from dpbench.sampler import ResourceSampler
    from dpbench.sampler.base import SHARED_CORE_MIN_INTERVAL
    from dpbench.sampler.gpus import unique_devices

    # Without a spare core the sampler samples less often, so it does not take slices from the
    # workers' threads; its summary records the interval it used and why.
    return ResourceSampler(
        interval=profile.sample_interval,
        pids=pids,
        devices=unique_devices(devices) or None,
        shared_core_interval=SHARED_CORE_MIN_INTERVAL,
    )


def _finish_sampler(
    sampler: Any, timeline: TimelinePath | None, name: str, per_rank_devices: list[str] = ()
) -> tuple[dict, str | None]:
    from dpbench.sampler.gpus import rank_devices

    summary = sampler.summary()
    # Which ranks ran on each sampled GPU ({"cuda:0": [0, 1]}): one device row, several ranks.
    summary["rank_devices"] = rank_devices(per_rank_devices)
    recorded = None
    if timeline is not None:
        target, recorded = timeline(name)
        sampler.save(target)
    summary["timeline"] = recorded
    return summary, recorded


@dataclass(kw_only=True, frozen=True)
class TrainingCase:
    """One benchmarked training configuration; ``id`` is the readable pytest id (``ddp-mlp-w2``).

    ``reference``: another case this one is judged against (``single`` for scaling efficiency,
    ``ddp`` for the allreduce suite); the session measures it even if its own test is deselected.
    """

    strategy: str
    workload: Any  # a registered name or a dpbench.Workload
    world_size: int
    global_batch: int
    # The options asked for, by name: they name the case (id) and are saved as requested_options;
    # held as the strategy's dataclass once (configuration), which launch checks on the trial's device.
    options: dict[str, Any] = field(default_factory=dict)
    reference: TrainingCase | None = field(default=None, compare=False)
    traceable: ClassVar[bool] = True  # measure_trial takes trace= (dpbench.measure.tracing)

    @property
    def id(self) -> str:
        parts = [self.strategy, str(getattr(self.workload, "name", self.workload)), f"w{self.world_size}"]
        parts += [f"{k}={v}" for k, v in sorted(self.options.items())]
        return "-".join(parts)

    @property
    def label(self) -> str:
        return f"{self.id} (batch {self.global_batch})"

    # A cached_property writes the instance's __dict__ itself, so it works on a frozen dataclass.
    @functools.cached_property
    def configuration(self) -> StrategyConfig | str:
        """The strategy with its options as the strategy's dataclass, built once per case; the name
        alone where an option is no option of the strategy (launch then says which)."""
        from dpbench.strategies.configs import StrategyConfig

        try:
            return StrategyConfig(strategy=self.strategy, options=tuple(self.options.items()))
        except (TypeError, ValueError):  # an unknown strategy, or option name: launch says which
            return self.strategy

    @functools.cached_property
    def key(self) -> str:
        """Strategy, workload, world size, batch and *resolved* options: ``{}`` and
        ``{"bucket_cap_mb": 25}`` are one configuration when 25 is the default (computed once)."""
        options = dict(self.options)
        configuration = self.configuration
        if not isinstance(configuration, str):
            try:  # checked as launch would on a CPU, the device every saved case_key was resolved on
                configuration.typed.check(device="cpu", world_size=self.world_size, global_batch=self.global_batch)
                options = configuration.typed.as_dict()
            except Exception:  # refused options: the trial reports why; the requested ones identify it
                pass
        workload = getattr(self.workload, "name", self.workload)
        return json.dumps(
            [
                "training",
                self.strategy,
                str(workload),
                self.world_size,
                self.global_batch,
                {str(k): repr(v) for k, v in sorted(options.items())},
            ]
        )

    def measure_trial(
        self,
        profile: Any,
        *,
        trial: int,
        steps_per_round: int | None,
        timeline: TimelinePath | None,
        first: bool,
        trace: TimelinePath | None = None,
    ) -> TrialResult:
        """``trace``: where the first trial's profiler traces go (opt-in, dpbench.measure.tracing)."""
        from dpbench.launcher import launch
        from dpbench.launcher.step_stats import merge_step_stats

        configuration = self.configuration
        with launch(
            configuration,
            profile.workload(self.workload),  # resolved once per session, not once per trial
            world_size=self.world_size,
            global_batch=self.global_batch,
            device=profile.device,
            seed=0,
            lr=LR,
            **(self.options if isinstance(configuration, str) else {}),
        ) as run:
            # Untimed: the first steps pay for allocator warm-up and DDP's bucket rebuild.
            probe = run.step(PROBE_STEPS)
            # The fingerprint's parameter sums are taken here, after the probe: the one step count
            # every case reaches at the same point (the steps per round that follow depend on each
            # case's own step time, so the model after the timed rounds differs in steps from case
            # to case). Between step calls and before the warm-up rounds, so no timed step includes
            # its gather or its sums; once per case (its first trial), like the case metrics.
            sums = run.fingerprint() if first and hasattr(run, "fingerprint") else None
            device_type = run.info.device_type
            k = steps_per_round or steps_for_trial(
                probe_s=min(probe.step_times), warm_s=None, profile=profile, device_type=device_type
            )
            # Warm-up needs steps, not a window: never more than the profile's round of them.
            warm = [run.step(min(k, profile.max_steps_per_round)) for _ in range(profile.warmup_rounds)]
            if steps_per_round is None and warm:
                fastest = min(t for r in warm for t in r.step_times)
                k = steps_for_trial(
                    probe_s=min(probe.step_times), warm_s=fastest, profile=profile, device_type=device_type
                )
            devices = [str(d) for d in run.info.devices]  # per rank
            with _sampled(run.pids, devices, profile) as sampler:
                rounds = [run.step(k) for _ in range(profile.rounds)]
            control = run.control()
            metrics = run.case_metrics() if first and hasattr(run, "case_metrics") else None
            if metrics is not None and sums is not None:
                metrics["fingerprint"] = fingerprint_record(sums, [probe, *warm, *rounds])
            traced = None
            if trace is not None and first:  # last: nothing measured afterwards runs after traced steps
                from dpbench.measure.tracing import trace_trial

                traced = trace_trial(
                    run,
                    trace,
                    f"{self.id}-b{self.global_batch}",
                    untraced_step_s=statistics.median(t for r in rounds for t in r.step_times),
                )
            info = run.info
        summary, recorded = _finish_sampler(sampler, timeline, f"{self.id}-b{self.global_batch}-t{trial + 1}", devices)
        merged = merge_step_stats(rounds)
        from dpbench.measure.energy import trial_energy

        # The sampler's window holds the timed rounds: every step of them trained a global batch.
        energy = trial_energy(summary, samples=len(merged.step_times) * info.global_batch, nodes=info.nodes)
        return TrialResult(
            trial=trial,
            order=-1,
            started_at=math.nan,
            steps_per_round=k,
            round_times=[r.total_time / r.steps for r in rounds],
            unit_times=list(merged.step_times),
            control_s=control,
            sampler=summary,
            timeline=recorded,
            case_metrics=metrics,
            detail=TrainingDetail(run_info=info, step_stats=merged, trace=traced, energy=energy),
            placement=placement(
                device_type=info.device_type,
                world_size=info.world_size,
                nodes=info.nodes,
                threads=info.threads_per_worker,
                rank_cores=(info.affinity or {}).get("rank_cores"),
            ),
        )


@dataclass(kw_only=True, frozen=True)
class CollectiveCase:
    """One collective at one message size over ``world_size`` ranks."""

    collective: str
    size_bytes: int
    world_size: int
    source: str = "sweep"  # "sweep" or "ddp-bucket"
    reference: None = field(default=None, compare=False)

    @property
    def id(self) -> str:
        return f"{self.collective}-{self.size_bytes}B-w{self.world_size}"

    @property
    def label(self) -> str:
        return self.id

    @property
    def key(self) -> str:
        return json.dumps(["collective", self.collective, self.size_bytes, self.world_size])

    def measure_trial(
        self, profile: Any, *, trial: int, steps_per_round: int | None, timeline: TimelinePath | None, first: bool
    ) -> TrialResult:
        from dpbench.launcher.control import control_worker
        from dpbench.measure.collectives import collective_worker, summarize
        from dpbench.workers.provider import make_pool

        iters = steps_per_round or profile.comm_iters
        # dpbench.cluster: make_pool spreads the ranks over the torchrun nodes under a cluster session.
        with make_pool(self.world_size, device=profile.device, timeout=120.0) as pool:
            pool.run(collective_worker, self.collective, self.size_bytes, iters)  # untimed warm-up round
            with _sampled(pool.pids, [], profile) as sampler:
                rounds = [
                    summarize(
                        self.collective,
                        self.size_bytes,
                        pool.run(collective_worker, self.collective, self.size_bytes, iters),
                    )
                    for _ in range(profile.rounds)
                ]
            control = max(pool.run(control_worker))
            layout = pool.layout()
            info = CollectiveDetail(
                backend=pool.backend,
                threads_per_worker=pool.threads_per_worker,
                world_size=pool.world_size,
                nodes=layout.nodes,
                ranks_per_node=layout.ranks_per_node,
                hosts=layout.hosts,
            )
        summary, recorded = _finish_sampler(sampler, timeline, f"{_safe(self.id)}-t{trial + 1}")
        calls = [t for r in rounds for t in r.times]  # each call as slow as its slowest rank
        return TrialResult(
            trial=trial,
            order=-1,
            started_at=math.nan,
            steps_per_round=iters,
            round_times=[statistics.fmean(r.times) for r in rounds],
            unit_times=calls,
            control_s=control,
            sampler=summary,
            timeline=recorded,
            detail=info,
            placement=placement(
                device_type=profile.device,
                world_size=info.world_size,
                nodes=info.nodes,
                threads=info.threads_per_worker,
                rank_cores=None,  # as saved: a collective's results do not record its cores
            ),
        )
