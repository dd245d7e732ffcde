"""Profiles: how big a suite run is (``quick`` on CPU, ``full`` on GPU runners), resolved once
per session from its settings (:mod:`dpbench.measure.settings`), and the strategy × workload ×
world-size cases.

Nothing here imports torch or pytest; a bad setting is a ValueError naming it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from dpbench.measure.cases import TrainingCase
from dpbench.measure.collectives import default_sizes
from dpbench.schema import Profile

if TYPE_CHECKING:
    from dpbench.measure.settings import SessionSettings

__all__ = [
    "ProfileConfig",
    "case_world_sizes",
    "resolve_profile",
    "strategy_cases",
    "world_sizes_for",
    "world_sizes_line",
]


@dataclass(kw_only=True, frozen=True)
class ProfileConfig:
    """How big a suite run is. ``quick``: CPU-sized, aimed at ≤ 5 minutes on 2 cores (measurements:
    docs/calibration.md#quick-profile-duration). ``full``: GPU runners. On CUDA the world sizes run
    up to one rank per GPU, and on a single GPU to 2 (two ranks sharing it, over gloo)."""

    name: Profile
    device: str
    world_sizes: tuple[int, ...]
    workloads: tuple[str, ...]
    scaling_workloads: tuple[str, ...]
    knob_workload: str
    global_batch: int
    per_replica_batch: int
    trials: int  # fresh-process trials per case, interleaved across the session
    rounds: int  # timed rounds per trial
    warmup_rounds: int  # untimed rounds per trial, after the probe
    target_round_s: float  # a round lasts about this long (k steps)
    max_steps_per_round: int
    sample_interval: float
    comm_sizes: tuple[int, ...]
    comm_iters: int
    bucket_cap_sweep: tuple[float, ...]
    # The workloads were named for this run (--dpbench-workload, dpbench run): every suite measures
    # each of them, where a suite otherwise picks those of the profile's that it is about.
    workloads_chosen: bool = False
    # The strategies measured (None: every one the suites have); others' cases are deselected,
    # the references the kept ones are judged against are still measured.
    strategies: tuple[str, ...] | None = None
    # The configurations named with them (dpbench.strategies.configs: "ddp@bucket_cap_mb=100"): each
    # its own case in the throughput and scaling suites; empty: one case per strategy.
    configurations: tuple[Any, ...] = ()
    # Options per strategy name for the throughput and scaling suites' cases (DPBENCH_STRATEGY_OPTIONS,
    # JSON: {"ddp": {"bucket_cap_mb": 25}}), e.g. the precision of every strategy.
    strategy_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Each workload spec resolved the first time it is asked for (:meth:`workload`), then carried
    # resolved to the cases' launches, their memory estimates and extra_info: once per session.
    # Per session, not per process: two sessions in one process may name different files alike.
    resolved_workloads: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def throughput_world_sizes(self) -> tuple[int, ...]:
        """World sizes of the throughput suite. Quick: the largest only — the scaling suite already
        measures 1…N, and a case measured twice costs trials that the gate needs."""
        return self.world_sizes if self.name is Profile.FULL else (max(self.world_sizes),)

    def workload(self, spec: Any) -> Any:
        """The :class:`dpbench.Workload` that ``spec`` names, resolved once per session (a
        ``Workload`` is returned as it is)."""
        from dpbench.workloads import resolve_workload

        if not isinstance(spec, str):
            return resolve_workload(spec)
        if spec not in self.resolved_workloads:
            self.resolved_workloads[spec] = resolve_workload(spec)
        return self.resolved_workloads[spec]

    def global_batch_for(self, workload: Any) -> int:
        """The global batch of ``workload``'s cases: the one its spec sets (``global_batch=N``), else the profile's."""
        return self.workload(workload).global_batch or self.global_batch

    def per_replica_batch_for(self, workload: Any) -> int:
        """The weak-scaling suite's per-replica batch of ``workload``: the profile's, or where its spec
        sets a global batch, that batch in the profile's proportion (global ÷ per-replica)."""
        batch = self.workload(workload).global_batch
        if batch is None:
            return self.per_replica_batch
        return max(1, batch * self.per_replica_batch // self.global_batch)

    def with_configurations(self, configurations: tuple[Any, ...]) -> ProfileConfig:
        """This profile measuring ``configurations`` (parsed: :func:`dpbench.strategies.configs.parse_configs`),
        their strategies only."""
        names = tuple(dict.fromkeys(c.strategy for c in configurations))
        return replace(self, strategies=names, configurations=configurations)

    def with_workloads(self, specs: tuple[str, ...], resolved: dict[str, Any] | None = None) -> ProfileConfig:
        """This profile measuring ``specs`` (already checked; ``resolved``: their workloads, spec by
        spec) in every suite, the first in the one-workload suites."""
        return replace(
            self,
            workloads=specs,
            scaling_workloads=specs,
            knob_workload=specs[0],
            workloads_chosen=True,
            resolved_workloads={**self.resolved_workloads, **(resolved or {})},
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(replace(self, resolved_workloads={}, configurations=()))
        del out["resolved_workloads"]  # live objects, not settings
        out["configurations"] = [c.spec for c in self.configurations]
        out["name"] = self.name.value
        out["throughput_world_sizes"] = list(self.throughput_world_sizes)
        return out


def resolve_profile(
    name: str | None = None,
    *,
    cuda_count: int,
    cpu_count: int | None = None,
    environ: Mapping[str, str] | None = None,
    cluster: Any = None,
    settings: SessionSettings | None = None,
) -> ProfileConfig:
    """The profile of a session with ``settings`` (:class:`dpbench.measure.settings.SessionSettings`;
    default: those of ``environ``'s ``DPBENCH_*`` variables alone), on a machine with ``cuda_count``
    GPUs and ``cpu_count`` cores. ``name`` overrides the settings' profile (default: ``full`` with
    CUDA, else ``quick``).

    ``cluster`` (a :class:`dpbench.cluster.ClusterInfo`; default: the active ``dpbench.cluster``
    session's): world sizes are bounded by the torchrun world — see
    :func:`dpbench.cluster.cluster_world_sizes` — and larger world sizes asked for are an error.
    """
    cpu_count = cpu_count or os.cpu_count() or 1
    cluster = _cluster_info(cluster)  # dpbench.cluster
    if settings is None:
        from dpbench.measure.settings import build_settings

        settings = build_settings(
            {},
            named=str,
            environ=os.environ if environ is None else environ,
            settled_by_default=False,
            max_world=lambda s: max(
                world_sizes_for(s, name=name, cuda_count=cuda_count, cpu_count=cpu_count, cluster=cluster)
            ),
        )
    profile = _profile(settings, name, cuda_count)
    device = settings.device or ("cuda" if cuda_count else "cpu")
    if device == "cuda" and not cuda_count:
        raise ValueError("DPBENCH_DEVICE=cuda but no CUDA device is visible")
    config: dict[str, Any] = dict(_SIZES[profile])
    config["comm_sizes"] = tuple(default_sizes(**config.pop("comm_sizes")))
    if settings.trials is not None:
        config["trials"] = settings.trials
    if settings.strategy_options:
        config["strategy_options"] = settings.strategy_options
    if settings.strategies:
        config["configurations"] = settings.strategies
        config["strategies"] = tuple(dict.fromkeys(c.strategy for c in settings.strategies))
    if settings.workloads:
        from dpbench.workloads import resolve_workload_specs

        specs = settings.workloads
        config["resolved_workloads"] = resolve_workload_specs(settings.workloads_named_by, specs)
        config["workloads"] = specs
        # Named for this session: every suite measures each; from DPBENCH_WORKLOADS, the first is
        # the one-workload suites' workload.
        config["scaling_workloads"] = specs if settings.workloads_chosen else specs[:1]
        config["knob_workload"] = specs[0]
        config["workloads_chosen"] = settings.workloads_chosen
    world_sizes = world_sizes_for(settings, name=name, cuda_count=cuda_count, cpu_count=cpu_count, cluster=cluster)
    return ProfileConfig(name=profile, device=device, world_sizes=world_sizes, **config)


_SIZES: dict[Profile, dict[str, Any]] = {
    Profile.QUICK: dict(
        workloads=("mlp", "lenet", "transformer"),
        scaling_workloads=("mlp",),
        knob_workload="mlp",
        global_batch=64,
        per_replica_batch=32,
        trials=5,
        rounds=2,
        warmup_rounds=1,
        target_round_s=0.2,
        max_steps_per_round=20,
        sample_interval=0.05,
        comm_sizes=dict(max_bytes=16 << 20, factor=16),
        comm_iters=5,
        bucket_cap_sweep=(1.0, 25.0),
    ),
    Profile.FULL: dict(
        workloads=("mlp", "lenet", "resnet18", "transformer", "dict_model"),
        scaling_workloads=("mlp", "resnet18", "transformer"),
        knob_workload="resnet18",
        global_batch=256,
        per_replica_batch=128,
        trials=5,
        rounds=5,
        warmup_rounds=2,
        target_round_s=0.5,
        max_steps_per_round=50,
        sample_interval=0.05,
        comm_sizes=dict(max_bytes=256 << 20, factor=4),
        comm_iters=20,
        bucket_cap_sweep=(1.0, 5.0, 25.0, 100.0),
    ),
}
"""Each profile's sizes: ``quick`` for CPUs, ``full`` for GPU runners (``comm_sizes``: the
collective sweep's arguments)."""


def _profile(settings: SessionSettings, name: str | None, cuda_count: int) -> Profile:
    raw = name or settings.profile or (Profile.FULL.value if cuda_count else Profile.QUICK.value)
    try:
        return Profile(raw)
    except ValueError:
        raise ValueError(f"DPBENCH_PROFILE must be one of {[p.value for p in Profile]}, got {raw!r}") from None


def world_sizes_for(
    settings: SessionSettings,
    *,
    name: str | None = None,
    cuda_count: int,
    cpu_count: int | None = None,
    cluster: Any = None,
) -> tuple[int, ...]:
    """The world sizes of a session with ``settings``: theirs, else 1 up to what the machine holds
    (bounded by the torchrun world, ``cluster``'s or the active session's)."""
    cpu_count = cpu_count or os.cpu_count() or 1
    cluster = _cluster_info(cluster)
    device = settings.device or ("cuda" if cuda_count else "cpu")
    if _profile(settings, name, cuda_count) is Profile.QUICK:
        # Up to the core count (capped at 4 so a big CPU box still finishes in minutes).
        max_world = _cuda_world(cuda_count) if device == "cuda" else min(cpu_count, 4)
    else:
        max_world = _cuda_world(cuda_count) if device == "cuda" else cpu_count
    world_sizes = tuple(range(1, max(max_world, 1) + 1))
    if cluster is not None:
        from dpbench.cluster.node import cluster_world_sizes

        world_sizes = cluster_world_sizes(max(max_world, 1), cluster)
    if settings.world_sizes:
        asked = settings.world_sizes
        if cluster is not None and max(asked) > cluster.world_size:
            raise ValueError(
                f"DPBENCH_WORLD_SIZES={','.join(map(str, asked))!r} asks for {max(asked)} ranks, but the "
                f"torchrun world has {cluster.world_size} (WORLD_SIZE: {cluster.nodes} node(s) × "
                f"{cluster.local_world_size} per node)"
            )
        world_sizes = asked
    return world_sizes


def _cuda_world(cuda_count: int) -> int:
    """The largest world size on ``cuda_count`` GPUs: one rank per GPU, and on a single GPU two ranks
    sharing it (gloo between them). World size 1 alone would make every strategy the baseline and
    skip the communication suite: nothing parallel would be measured."""
    return cuda_count if cuda_count >= 2 else 2


def _cluster_info(cluster: Any) -> Any:
    """``cluster`` itself, else the active dpbench.cluster session's info (None: one host)."""
    if cluster is not None:
        return cluster
    from dpbench.cluster.remote import active_session

    session = active_session()
    return session.info if session is not None else None


def strategy_cases(
    workloads: tuple[str, ...],
    world_sizes: tuple[int, ...],
    global_batch: Callable[[int], int],
    *,
    options: dict[str, dict[str, Any]] | None = None,
    configurations: tuple[Any, ...] = (),
) -> list[TrainingCase]:
    """Every strategy × workload × world size (``single`` only at 1, the baseline), with
    ``global_batch(world_size)`` samples per step: fixed for strong scaling, growing for weak;
    ``options``: per strategy name, the options of its cases; ``configurations``: named ones
    (:class:`dpbench.strategies.configs.StrategyConfig`), a case each, their options over ``options``."""
    from dpbench.schema import StrategyName

    options = options or {}
    cases = []
    for workload in workloads:
        for strategy in StrategyName:
            sizes = case_world_sizes(strategy.value, world_sizes)
            base = dict(options.get(strategy.value, {}))
            named = [c.as_dict() for c in configurations if c.strategy == strategy.value]
            cases += [
                TrainingCase(
                    strategy=strategy.value,
                    workload=workload,
                    world_size=size,
                    global_batch=global_batch(size),
                    options={**base, **own},
                )
                for own in named or [{}]
                for size in sizes
            ]
    return cases


def case_world_sizes(strategy: str, world_sizes: tuple[int, ...]) -> tuple[int, ...]:
    """The world sizes ``strategy``'s cases run at: the baseline (one replica) at 1 alone, whatever
    was asked; every other strategy at each of ``world_sizes``."""
    from dpbench.schema import BASELINE_STRATEGY

    return (1,) if strategy == BASELINE_STRATEGY else tuple(world_sizes)


def world_sizes_line(settings: SessionSettings) -> str | None:
    """Before the trials, one line on what the configurations and world sizes asked for will not
    measure (None: nothing to say): the world sizes the baseline does not run at, where its
    configuration or those sizes were asked for; and that nothing can be ranked where they make
    one configuration a workload (its throughput is still measured)."""
    from dpbench.schema import BASELINE_STRATEGY, StrategyName

    asked = settings.world_sizes
    configs = [c.spec for c in settings.strategies] or [s.value for s in StrategyName]
    strategies = [c.strategy for c in settings.strategies] or configs
    parts = []
    dropped = [n for n in asked or () if n != 1]
    if BASELINE_STRATEGY in strategies and dropped and (settings.strategies or 1 not in asked):
        sizes = ", ".join(map(str, dropped))
        parts.append(f"{BASELINE_STRATEGY} runs at world size 1 only (the baseline: one replica), not at {sizes}")
    if len(configs) == 1 and (asked or strategies == [BASELINE_STRATEGY]):
        (size, *more) = case_world_sizes(strategies[0], asked or (1,))
        if not more:
            parts.append(f"nothing to rank: one configuration a workload ({configs[0]} w{size}), its throughput alone")
    return "; ".join(parts) or None
