"""A step measured anywhere — the user's own training script on their GPU, a published table — as a
:class:`~dpbench.predict.profile.StepProfile`, beside the saved run.

What was measured is a :class:`MeasuredStep`: the workload, the strategy configuration (the spec
syntax of ``dpbench run --strategies``, parsed by :func:`dpbench.strategies.configs.parse_configs`
at the world size it ran at), that world size, the per-rank batch, the step time, and what else is
known (the forward / backward / optimizer split, the compute-only step, the trial interval, the
device; accumulation steps and precision as the configuration's options). What the measurement
does not say is filled by a default that the profile names in :attr:`StepProfile.stated`
(``backward = 2 × forward (assumed)``), so the answer says what it rests on.

The parameters come from a :class:`~dpbench.strategies.layout.ParameterLayout`: the workload built
on the meta device (:func:`dpbench.strategies.layout.meta_layout`, the command's default), or stated
(``parameter_count``, or a layer order a study gives).

A TOML file holds the same fields (:func:`read_step_file`, ``dpbench predict --step FILE``)::

    workload = "hf:resnet@num_labels=1000"
    strategy = "ddp@broadcast_buffers=false"
    world_size = 1
    per_rank_batch = 32
    step_time_s = 0.097
    device = "cuda"

Every field missing or contradicting another is one line of one :class:`~dpbench.errors.UsageError`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dpbench.errors import UsageError
from dpbench.predict.basis import basis_notes, check_model
from dpbench.predict.collectives import CollectiveModel
from dpbench.predict.compute import linear_compute
from dpbench.predict.forecast import StepForecast, pick_strategies
from dpbench.predict.profile import GradientGroup, StepProfile, buckets_from_sizes, case_label
from dpbench.predict.step import OverlapSlowdown, predict_step, stated_overlap, with_derived_collectives
from dpbench.strategies import BucketSync, scheduled_strategies, step_schedule
from dpbench.strategies.layout import ParameterLayout

__all__ = [
    "DEVICES",
    "FIELDS",
    "MeasuredStep",
    "measured_forecast",
    "measured_profile",
    "read_step_file",
    "step_from_mapping",
]

DEVICES = ("cuda", "cpu")
"""Where a measured step may have run."""

FIELDS = {
    "workload": "the workload spec (mlp, hf:gpt2@n_layer=2): its parameters are built on the meta device",
    "parameter_count": "instead of building the workload: its trainable parameters (fp32), in one layer",
    "strategy": "the strategy configuration it ran (ddp@bucket_cap_mb=25), as dpbench run --strategies takes it",
    "world_size": "the ranks it was measured at",
    "per_rank_batch": "samples per rank per step",
    "step_time_s": "the measured step, s",
    "forward_s": "forward per step, s",
    "backward_s": "backward per step, s",
    "optimizer_s": "the optimizer step, s",
    "compute_only_step_s": "the same step with gradient sync off, s (at world size 2+)",
    "step_time_ci95": "the step's 95% interval over trials, [lo, hi] s",
    "device": "where it ran: cuda or cpu",
    "accumulation_steps": "micro-batches per step (the strategy's option)",
    "precision": "fp32, bf16, fp16 (the strategy's option)",
    "source": "where the measurement came from, in words",
}
"""The fields a measured step takes, each with what it is (the file's keys)."""

_OPTION_FIELDS = ("accumulation_steps", "precision")
_PARAM_BYTES = 4


@dataclass(kw_only=True, frozen=True)
class MeasuredStep:
    """One step measured anywhere (see the module doc); None: not known."""

    workload: str | None = None
    """The workload spec; its parameters are built on the meta device unless a layout is given."""
    parameter_count: int | None = None
    """Trainable parameters, where no workload spec builds them (one layer: buckets cut from the bytes)."""
    strategy: str | None = None
    """The strategy configuration (``ddp@bucket_cap_mb=25``)."""
    world_size: int | None = None
    """Ranks it was measured at."""
    per_rank_batch: int | None = None
    """Samples per rank per step."""
    step_time_s: float | None = None
    """The measured step, s."""
    forward_s: float | None = None
    """Forward per step, s."""
    backward_s: float | None = None
    """Backward per step, s."""
    optimizer_s: float | None = None
    """The optimizer step, s."""
    compute_only_step_s: float | None = None
    """The step with gradient sync off, s (world size 2+: else its own collectives are taken out by the model)."""
    step_time_ci95: tuple[float, float] | None = None
    """The step's 95% interval over trials, s."""
    device: str | None = None
    """``cuda`` or ``cpu``."""
    accumulation_steps: int | None = None
    """Micro-batches per step (the strategy's option, given beside it)."""
    precision: str | None = None
    """The strategy's precision option, given beside it."""
    source: str = ""
    """Where it came from (a file, a table), in words."""


def step_from_mapping(values: Mapping[str, Any], *, source: str = "") -> MeasuredStep:
    """A :class:`MeasuredStep` from a file's keys; unknown keys and values of the wrong type, one line each."""
    problems = []
    for key in values:
        if key not in FIELDS:
            from dpbench.errors import did_you_mean

            problems.append(f"{source or 'step'}: {key}: not a field{did_you_mean(key, list(FIELDS))}")
    ints = ("parameter_count", "world_size", "per_rank_batch", "accumulation_steps")
    floats = ("step_time_s", "forward_s", "backward_s", "optimizer_s", "compute_only_step_s")
    texts = ("workload", "strategy", "device", "precision", "source")
    kept: dict[str, Any] = {}
    for key, value in values.items():
        if key in ints:
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif key in floats:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        elif key in texts:
            ok = isinstance(value, str) and bool(value.strip())
        elif key == "step_time_ci95":
            ok = (
                isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, (int, float)) for v in value)
            )
            value = tuple(float(v) for v in value) if ok else value
        else:
            continue
        if not ok:
            problems.append(f"{source or 'step'}: {key}: expected {FIELDS[key]}, found {value!r}")
        else:
            kept[key] = value
    if problems:
        raise UsageError("\n".join(problems))
    return MeasuredStep(**{"source": source, **kept})


def read_step_file(path: str) -> MeasuredStep:
    """The measured step a TOML file states (see the module doc)."""
    import tomllib

    try:
        with open(path, "rb") as fh:
            values = tomllib.load(fh)
    except OSError as exc:
        raise UsageError(f"--step: {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"--step: {path}: expected TOML, found an error: {exc}") from None
    return step_from_mapping(values, source=str(values.get("source") or path))


def _missing(step: MeasuredStep, layout: ParameterLayout | None) -> list[str]:
    where = step.source or "step"
    out = []
    if step.workload is None and step.parameter_count is None and layout is None:
        out.append(f"{where}: workload: expected a workload spec (or parameter_count), found none")
    for key in ("strategy", "world_size", "per_rank_batch", "step_time_s"):
        if getattr(step, key) is None:
            out.append(f"{where}: {key}: expected {FIELDS[key]}, found none")
    for key in ("world_size", "per_rank_batch", "parameter_count", "accumulation_steps"):
        value = getattr(step, key)
        if value is not None and value < 1:
            out.append(f"{where}: {key}: expected a positive integer, found {value}")
    for key in ("step_time_s", "forward_s", "backward_s", "optimizer_s", "compute_only_step_s"):
        value = getattr(step, key)
        if value is not None and value <= 0 and not (key == "optimizer_s" and value == 0):
            out.append(f"{where}: {key}: expected a positive number of seconds, found {value}")
    if step.device is not None and step.device not in DEVICES:
        out.append(f"{where}: device: expected one of {', '.join(DEVICES)}, found {step.device!r}")
    return out


def _config(step: MeasuredStep) -> tuple[str, dict[str, Any], str, list[str]]:
    """(strategy, its resolved options, its label, problems) of the step's configuration and the
    options given beside it."""
    from dpbench.strategies.configs import merge_options, parse_configs

    where = step.source or "step"
    try:
        (config,) = parse_configs(f"{where}: strategy", step.strategy, world_size=step.world_size)
    except ValueError as exc:
        return "", {}, "", [str(exc).splitlines()[0]]
    given = {k: getattr(step, k) for k in _OPTION_FIELDS if getattr(step, k) is not None}
    try:
        named = merge_options(config.spec, config.as_dict(), given, given_as=f"{where}'s fields")
    except ValueError as exc:
        return "", {}, "", [f"{where}: {exc}"]
    if config.strategy not in scheduled_strategies():
        return (
            "",
            {},
            "",
            [
                f"{where}: strategy: expected one of {', '.join(scheduled_strategies())} (a step the model "
                f"replays), found {config.strategy!r}"
            ],
        )
    from dpbench.strategies import StrategyUnavailable, get_strategy

    cls = get_strategy(config.strategy)
    try:
        typed = cls.options_type(**named)
        typed.check(
            device=step.device or "cuda", world_size=step.world_size, global_batch=step.world_size * step.per_rank_batch
        )
    except StrategyUnavailable:  # this machine could not run it (fp16 on CPU); the measurement did
        pass
    except (TypeError, ValueError) as exc:
        return "", {}, "", [f"{where}: strategy {config.spec!r} at world size {step.world_size}: {exc}"]
    return config.strategy, dataclasses.asdict(typed), case_label(config.strategy, named), []


def _phases(step: MeasuredStep, compute: float) -> tuple[tuple[float, float, float], list[str], list[str]]:
    """(forward, backward, optimizer) adding up to ``compute``; what was assumed; contradictions."""
    where = step.source or "step"
    f, b, o = step.forward_s, step.backward_s, step.optimizer_s
    stated: list[str] = []
    known = sum(v for v in (f, b, o) if v is not None)
    if known > compute * 1.001:
        given = " + ".join(k for k, v in (("forward_s", f), ("backward_s", b), ("optimizer_s", o)) if v is not None)
        return (
            (0.0, 0.0, 0.0),
            [],
            [f"{where}: {given} = {known:.6g} s: expected at most the compute of {compute:.6g} s"],
        )
    if f is not None and b is not None and o is not None:
        scale = compute / known if known > 0 else 1.0
        return (f * scale, b * scale, o * scale), stated, []
    if o is None:
        if f is not None and b is not None:
            o = compute - f - b
            stated.append("optimizer = compute − forward − backward (derived)")
        else:
            o = 0.0
            stated.append("optimizer = 0 (assumed: not measured apart)")
    rest = compute - o
    if f is None and b is None:
        f, b = rest / 3.0, rest * 2.0 / 3.0
        stated.append("backward = 2 × forward (assumed)")
    elif f is None:
        f = rest - b
        stated.append("forward = compute − backward − optimizer (derived)")
    elif b is None:
        b = rest - f
        stated.append("backward = compute − forward − optimizer (derived)")
    return (f, b, o), stated, []


def _layout(step: MeasuredStep, layout: ParameterLayout | None) -> ParameterLayout:
    if layout is not None:
        return layout
    count = int(step.parameter_count or 0)
    return ParameterLayout(
        sizes=(count * _PARAM_BYTES,), origin=f"stated: {count:,} parameters (parameter_count), in one layer"
    )


def _groups(options: Mapping[str, Any], strategy: str, layout: ParameterLayout) -> dict[str, Any]:
    sync = step_schedule(strategy, options).gradients
    if isinstance(sync, BucketSync):  # backward makes the last-defined parameters ready first
        ready = tuple(reversed(layout.sizes))
        return {"buckets": buckets_from_sizes(ready, first_bytes=sync.first_bytes, cap_bytes=sync.cap_bytes)}
    sizes = layout.unit_sizes or (layout.param_bytes,)
    total = sum(sizes) or 1
    done, units = 0, []
    for size in sizes:
        done += size
        units.append(GradientGroup(bytes=size, ready_fraction=done / total))
    return {"units": tuple(units)}


def measured_profile(step: MeasuredStep, *, layout: ParameterLayout | None = None) -> StepProfile:
    """The :class:`StepProfile` of a step measured anywhere; a UsageError with one line per field
    missing or contradicting another. ``layout``: the model's parameters (default: one layer of
    ``parameter_count``; the command builds the workload's on the meta device).

    At world size 2 or more without ``compute_only_step_s`` the profile's compute is the whole
    step, its own collectives still in it: :func:`measured_forecast`
    takes them out with the collective model before scaling it (``StepProfile.stated`` says so)."""
    where = step.source or "step"
    problems = _missing(step, layout)
    if problems:
        raise UsageError("\n".join(problems))
    strategy, options, label, problems = _config(step)
    if problems:
        raise UsageError("\n".join(problems))
    world = int(step.world_size)
    compute = step.step_time_s
    stated: list[str] = []
    if step.compute_only_step_s is not None:
        if world == 1:
            problems.append(f"{where}: compute_only_step_s: expected it only at world size 2+ (1 sends nothing)")
        elif step.compute_only_step_s > step.step_time_s:
            problems.append(
                f"{where}: compute_only_step_s = {step.compute_only_step_s:g} s: expected at most step_time_s = "
                f"{step.step_time_s:g} s"
            )
        compute = step.compute_only_step_s
    elif world > 1:
        stated.append(f"compute = the step at w{world} less its own collectives, as the collective model times them")
    ci = step.step_time_ci95
    if ci is not None and not ci[0] <= step.step_time_s <= ci[1]:
        problems.append(
            f"{where}: step_time_ci95 = {list(ci)}: expected an interval around step_time_s = {step.step_time_s:g}"
        )
    (forward, backward, optimizer), assumed, contradictions = _phases(step, compute)
    problems += contradictions
    if problems:
        raise UsageError("\n".join(problems))
    if step.device is None:
        stated.append("device = cuda (assumed: the measurement did not say)")
    layout = _layout(step, layout)
    spec = step.workload or f"{step.parameter_count:,} parameters"
    return StepProfile(
        workload=spec,
        strategy=strategy,
        label=label,
        options=options,
        world_size=world,
        per_rank_batch=int(step.per_rank_batch),
        forward_s=forward,
        backward_s=backward,
        optimizer_s=optimizer,
        param_bytes=layout.param_bytes,
        step_time_s=float(step.step_time_s),
        spread=(ci[0] / step.step_time_s, ci[1] / step.step_time_s) if ci else (1.0, 1.0),
        device_type=step.device or "cuda",
        origin=f"{where}: {label} {spec} w{world} (measured elsewhere; parameters: {layout.origin})",
        buffer_bytes=layout.buffer_bytes,
        compute_floor=linear_compute(f"{where} gives one per-rank batch ({step.per_rank_batch})"),
        stated=tuple(stated + assumed),
        **_groups(options, strategy, layout),
    )


def _own_collectives_out(
    profile: StepProfile, model: CollectiveModel, overlap: OverlapSlowdown
) -> tuple[StepProfile, str]:
    """``profile`` (a step measured at 2+ ranks, its compute still holding its own collectives) with
    its compute scaled so the model's replay at its own world size gives its measured step; and
    the line that says how much came out."""
    target = profile.step_time_s

    def replayed(scale: float) -> float:
        scaled = dataclasses.replace(
            profile,
            forward_s=profile.forward_s * scale,
            backward_s=profile.backward_s * scale,
            optimizer_s=profile.optimizer_s * scale,
        )
        return predict_step(scaled, model, profile.world_size, overlap=overlap).step_time_s

    lo, hi = 1e-9, 1.0  # a compute of exactly 0 leaves the one-rank reference of the efficiency empty
    if replayed(lo) >= target:
        raise UsageError(
            f"{profile.origin}: step_time_s = {target:g} s: expected more than its own collectives at "
            f"w{profile.world_size} ({replayed(lo):g} s as the collective model times them): the links contradict it"
        )
    for _ in range(50):  # the replayed step grows with the compute: bisect
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if replayed(mid) < target else (lo, mid)
    scale = (lo + hi) / 2
    out = dataclasses.replace(
        profile,
        forward_s=profile.forward_s * scale,
        backward_s=profile.backward_s * scale,
        optimizer_s=profile.optimizer_s * scale,
        stated=tuple(line for line in profile.stated if not line.startswith("compute = the step at")),
    )
    line = (
        f"{profile.label} on {profile.workload}: compute = the step at w{profile.world_size} less its own "
        f"collectives' exposed time ({(1 - scale) * profile.compute_s * 1e3:.3g} ms, "
        "as the collective model times them)"
    )
    return out, line


def measured_forecast(
    profiles: list[StepProfile],
    model: CollectiveModel,
    world_sizes: list[int],
    *,
    scaling: str = "weak",
    overlap: OverlapSlowdown | None = None,
    source: str = "a step measured elsewhere",
    accumulation: str = "count",
) -> StepForecast:
    """Steps measured anywhere (:func:`dpbench.predict.measured.measured_profile`) predicted at
    ``world_sizes``; ``overlap``: default stated by the device the compute was measured on. A
    profile measured at 2+ ranks without its compute-only step has its own collectives taken out
    of its compute first (as the model times them at that world size)."""
    if not world_sizes or any(n < 1 for n in world_sizes):
        raise UsageError(f"--world-sizes: expected positive integers, found {world_sizes}")
    model = with_derived_collectives(model)
    check_model(profiles, model, world_sizes + [p.world_size for p in profiles])
    given = overlap is not None
    if not given:
        device = profiles[0].device_type
        stated = stated_overlap(device)
        overlap = dataclasses.replace(
            stated,
            origin=f"stated for {device} (a step measured elsewhere measures none): {stated.origin.split(': ', 1)[1]}",
        )
    notes = []
    ready = []
    for p in profiles:
        if p.world_size > 1 and any(line.startswith("compute = the step at") for line in p.stated):
            p, line = _own_collectives_out(p, model, overlap)
            notes.append(line)
        ready.append(p)
    predictions = [
        predict_step(p, model, n, overlap=overlap, scaling=scaling, accumulation=accumulation)
        for p in ready
        for n in world_sizes
    ]
    notes = list(model.notes) + basis_notes(ready, model) + notes
    for note in dict.fromkeys(note for p in ready for note in p.schedule.notes):
        notes.append(note)
    return StepForecast(
        source=source,
        scaling=scaling,
        overlap=overlap,
        profiles=tuple(ready),
        predictions=tuple(predictions),
        picks=tuple(pick_strategies(predictions)),
        notes=tuple(notes),
    )
