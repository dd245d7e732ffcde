"""What a forecast rests on: the collective model built from the command line's sources (the
logs given, the run's own comm-suite benchmarks, a stated link — which wins where, and where they
contradict), whether that model can time what the strategies issue at the world sizes asked
(else one line naming the options that would answer), and the lines that say where the compute
was measured, what a profile assumed, which source timed each collective tier, and whether the
source run's machine was busy.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from dpbench.errors import UsageError
from dpbench.predict.collectives import CollectiveModel, fit_collectives
from dpbench.predict.measurements import read_comm_run, read_measurements
from dpbench.predict.model import INTER, INTRA, parse_link
from dpbench.predict.profile import StepProfile
from dpbench.predict.step import needed_collectives

__all__ = ["basis_notes", "busy_line", "check_model", "run_collective_model"]


def run_collective_model(
    run: Any,
    *,
    collectives: Sequence[str] | None = None,
    link: str | None = None,
    gpus_per_node: int | None = None,
    collective: str | None = None,
) -> CollectiveModel:
    """The collective model to predict ``run`` with (None: a step measured elsewhere), from the
    command line's sources: the measurements in ``collectives`` (nccl-tests logs, comm-suite runs;
    ``collective`` names the collective of logs that do not say), else the run's own comm-suite
    benchmarks, plus the stated ``link`` (``--link`` text); ``gpus_per_node`` as ``--gpus-per-node``.

    A stated link is never ignored: it wins over the run's own measurements of the tier it states
    (they measured the machine the run ran on, the link the cluster asked about); beside logs
    given in ``collectives`` it must agree with their fit of the same tier (within its interval),
    else it is refused as contradicting them. The model's notes say which won."""
    stated = parse_link(link) if link else None
    notes: list[str] = []
    origin = ""
    if collectives:
        measurements = read_measurements(list(collectives), collective=collective)
    else:
        measurements = read_comm_run(run.path) if run is not None and _has_collectives(run) else []
        if not measurements and stated is None:
            where = f"{run.run_id} has no comm-suite benchmarks" if run is not None else "a measured step"
            raise UsageError(
                f"--collectives: {where}: expected nccl-tests logs or a comm-suite run in --collectives, "
                "or a stated link, e.g. --link intra=10GB/s, found neither"
            )
        if stated is not None and measurements:
            if gpus_per_node is None:  # the run's own ranks per node, whichever tiers the link replaces
                gpus_per_node = max(m.ranks_per_node for m in measurements)
                origin = "the most ranks on one node in the run's own collectives"
            measurements, notes = _stated_wins(measurements, stated)
    model = fit_collectives(measurements, link=stated, gpus_per_node=gpus_per_node)
    if origin:
        model = dataclasses.replace(model, gpus_per_node_origin=origin)
    return dataclasses.replace(model, notes=model.notes + tuple(notes)) if notes else model


def _stated_tiers(link: Any) -> set[str]:
    tiers = {INTRA} if link.intra_gbps is not None else set()
    return tiers | ({INTER} if link.inter_gbps is not None or link.inter_busbw_gbps is not None else set())


def _stated_wins(measurements: list[Any], link: Any) -> tuple[list[Any], list[str]]:
    """The run's own measurements less those of the tiers ``link`` states, and a note per tier replaced."""
    tiers = _stated_tiers(link)
    kept = [m for m in measurements if (INTER if m.nodes > 1 else INTRA) not in tiers]
    notes = []
    for tier in sorted(tiers):
        dropped = [m for m in measurements if (INTER if m.nodes > 1 else INTRA) == tier]
        if dropped:
            backends = ", ".join(sorted({m.backend or "unrecorded backend" for m in dropped}))
            notes.append(
                f"{tier} tier: the stated {link.text()} wins over the run's own {len(dropped)} measurements of it "
                f"({backends}, on the machine the run measured)"
            )
    return kept, notes


def _has_collectives(run: Any) -> bool:
    return any((b.get("extra_info") or {}).get("kind") == "collective" for b in run.benchmarks)


def busy_line(run: Any) -> str | None:
    """The line the session printed where the run's machine was busy (:func:`dpbench.stats.busy_run_line`:
    too many disturbed trials, or controls spread wide throughout), from its saved trials; else None."""
    from dpbench.decision.contention import foreign_cpu, others_quiet, run_share
    from dpbench.results.disturbed import placement
    from dpbench.stats import TrialSeries, busy_run_line, disturbance_limits

    def slots(values: Any) -> tuple[float, ...]:
        ok = [v for v in values or [] if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0]
        return tuple(float(v) for v in ok)

    series, disturbed, unreplaced, total, shares = [], 0, 0, 0, []
    for bench in run.benchmarks:
        info = bench.get("extra_info") or {}
        trials = info.get("trials") or {}
        values = slots(trials.get("step_time_s"))
        if not values:
            continue
        total += len(values)
        shares.append(foreign_cpu(trials, run.machine_info.get("cpu_count")))
        flags = [f for f in trials.get("disturbed") or [] if isinstance(f, dict)]
        disturbed += len(flags)
        unreplaced += sum(1 for f in flags if not f.get("replaced"))
        series.append(TrialSeries(placement=placement(info), values=values, controls=slots(trials.get("control_s"))))
    if not series:
        return None
    spread = disturbance_limits(series).control_spread
    return busy_run_line(
        disturbed=disturbed,
        total=total,
        unreplaced=unreplaced,
        control_spread=spread,
        others_quiet=others_quiet(run_share(shares)),
    )


def check_model(profiles: list[StepProfile], model: CollectiveModel, world_sizes: list[int]) -> None:
    """A one-line refusal, naming the options that would answer, where the model cannot time what the
    profiles' schedules issue at ``world_sizes``."""
    for p in profiles:
        for name in needed_collectives(p):
            if name not in model.collectives():
                stated = model.link is not None
                raise UsageError(
                    f"{p.label} needs {name}: the collective model has no measurement of it (it has "
                    f"{', '.join(model.collectives()) or 'none'}"
                    + (
                        f"; the stated {model.link.text()} stands in only for the collectives measured or "
                        "where none is measured)"
                        if stated
                        else ")"
                    )
                    + f": expected {name} measurements in --collectives"
                    + ("" if stated else ", or a link stated to stand in, e.g. --link intra=10GB/s")
                    + f"; or leave {p.label} out (--strategies)"
                )
    spans = [n for n in world_sizes if n > model.gpus_per_node]
    tiers = {(t.collective, t.tier) for t in model.tiers}
    for p in profiles:
        for name in needed_collectives(p):
            if spans and (name, INTER) not in tiers:
                raise UsageError(
                    f"world size {spans[0]}: spans {math.ceil(spans[0] / model.gpus_per_node)} nodes of "
                    f"{model.gpus_per_node} GPUs ({model.gpus_per_node_origin}), and no {name} measurement or "
                    "stated link crosses nodes: expected logs across nodes in --collectives, the link between "
                    "nodes stated (--link inter=25GB/s), or more GPUs per node (--gpus-per-node)"
                )
            inside = [n for n in world_sizes if 1 < n <= model.gpus_per_node]
            if inside and (name, INTRA) not in tiers:
                raise UsageError(
                    f"world size {inside[0]}: inside one node of {model.gpus_per_node} GPUs "
                    f"({model.gpus_per_node_origin}), and every {name} measurement crosses nodes: expected logs "
                    "inside a node in --collectives, or the link inside a node stated (--link intra=450GB/s)"
                )


def basis_notes(profiles: list[StepProfile], model: CollectiveModel) -> list[str]:
    """What the predictions rest on: where the compute was measured, and which source timed each
    collective tier (a stated link or measurements)."""
    notes = []
    gpu_links = "nccl" in model.backends or model.link is not None
    for device in sorted({p.device_type for p in profiles}):
        labels = sorted({p.label for p in profiles if p.device_type == device})
        line = f"compute measured on {device} ({', '.join(labels)})"
        if device == "cpu" and gpu_links:
            line += (
                ": the predictions are CPU compute with these collectives, not a GPU's step; give a step "
                "measured on the GPU (--step FILE) for a GPU's"
            )
        notes.append(line)
    for p in profiles:
        for line in p.stated:
            notes.append(f"{p.label} on {p.workload}: {line}")
    needed = sorted({name for p in profiles for name in needed_collectives(p)})
    for fit in model.tiers:
        if fit.collective in needed:
            notes.append(f"{fit.collective} {fit.tier}: {fit.origin}")
    return notes
