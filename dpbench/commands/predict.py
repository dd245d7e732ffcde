"""``dpbench predict collectives``: a collective cost model fitted on nccl-tests logs and saved
comm-suite runs (plus a stated link), and its predictions at the world sizes asked for;
``dpbench predict RUN``: every strategy's step at those world sizes, from a saved run and that
model, and which strategy to pick (:mod:`dpbench.predict`)."""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from dpbench.commands.options import RUN_HELP, ExamplesFormatter, add_results_dir, examples, int_list, positive_int
from dpbench.errors import UsageError, did_you_mean, expected_one_of
from dpbench.results.console import write_json

__all__ = ["LINK_HELP", "MEMORY_KINDS", "measured_profiles", "memory_estimator", "register_predict"]

TARGETS = ("collectives",)


_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "kb": 10**3, "mb": 10**6, "gb": 10**9}


def _size(raw: str) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", raw)
    if not m or m.group(2).lower() not in _UNITS:
        raise UsageError(f"--min-bytes: expected a size like 1MiB, 65536 or 4KiB, found {raw!r}")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def _predict(args: argparse.Namespace) -> int:
    if args.step:
        if args.target is not None:
            raise UsageError(f"--step: expected a measured step or a TARGET, found both ({args.target!r})")
        return _predict_measured(args)
    if args.target is None:
        raise UsageError("TARGET: expected collectives, a saved run, or --step FILE, found none")
    if args.strategies and args.target == "collectives":
        raise UsageError("--strategies: only for a saved run or --step, not for TARGET collectives")
    if args.target != "collectives":
        return _predict_run(args)
    from dpbench.predict import (
        fit_collectives,
        format_collectives,
        json_document,
        parse_link,
        predict_collectives,
        read_measurements,
    )

    worlds = int_list(args.world_sizes, "--world-sizes")
    link = parse_link(args.link) if args.link else None
    if not args.sources and link is None:
        raise UsageError("--from: expected nccl-tests logs or saved comm-suite runs (or --link), found none")
    measurements = read_measurements(args.sources or [], collective=args.collective)
    fitted = [m for m in measurements if m.bytes >= _size(args.min_bytes)] if args.min_bytes else measurements
    model = fit_collectives(fitted, link=link, gpus_per_node=args.gpus_per_node)
    held_out = read_measurements(args.check, collective=args.collective) if args.check else []
    predictions = predict_collectives(model, measurements + held_out, worlds)
    if args.json:
        write_json(args.json, json_document(model, predictions))
        if args.json == "-":
            return 0
    sys.stdout.write(format_collectives(model, predictions))
    return 0


def _resolve_target(args: argparse.Namespace) -> Any:
    from dpbench.results.load import ResultsError, read_run, resolve_run

    try:
        return read_run(resolve_run(args.target, results_dir=args.results))
    except ResultsError as exc:
        if did_you_mean(args.target, TARGETS):  # a misspelt target, not a run
            raise UsageError(expected_one_of("TARGET", args.target, TARGETS)) from None
        raise UsageError(f"TARGET: {exc}") from None


LINK_HELP = (
    "stated links, e.g. intra=450GB/s,inter=25GB/s,latency=10us (inter: each GPU's line rate), or "
    "inter-busbw=124GB/s (the bus bandwidth measured across nodes)"
)
"""``--link``'s help, wherever a command takes a collective model's sources."""

MEMORY = ("state", "peak", "off")
MEMORY_KINDS = {
    "state": "what a rank holds between steps (parameters, gradients, optimizer state, buffers), estimated",
    "peak": "the estimated peak of a step (state plus one forward + backward)",
}
"""What each ``--memory`` estimate counts, in words (``off``: none)."""


def memory_estimator(kind: str) -> Any:
    """The estimator's bytes per rank of a profile at a world size and global batch (None where it
    cannot): ``state``, what a rank holds between steps (the model on the meta device: fast);
    ``peak``, with one forward + backward under FakeTensorMode on top (seconds per batch size);
    None for ``off``. The estimator imports torch when first asked, not before."""
    if kind == "off":
        return None
    estimators: dict[str, Any] = {}

    def memory(profile: Any, world_size: int, global_batch: int) -> int | None:
        from dpbench.strategies.estimate import EstimateError, Estimator

        try:
            if profile.workload not in estimators:
                estimators[profile.workload] = Estimator(profile.workload, activations=kind == "peak")
            est = estimators[profile.workload]
            if est is None:
                return None
            return est.case(
                profile.strategy, world_size=world_size, global_batch=global_batch, options=dict(profile.options)
            ).need_bytes()
        except (ValueError, EstimateError, TypeError):
            estimators.setdefault(profile.workload, None)
            return None

    return memory


def _overlap(args: argparse.Namespace) -> Any:
    from dpbench.predict import OverlapSlowdown

    if args.overlap_slowdown is None:
        return None
    if not 0.0 <= args.overlap_slowdown <= 1.0:
        raise UsageError(f"--overlap-slowdown: expected a fraction in [0, 1], found {args.overlap_slowdown}")
    return OverlapSlowdown(value=args.overlap_slowdown, origin="stated: --overlap-slowdown")


def _strategies(args: argparse.Namespace) -> list[str] | None:
    return [s.strip() for s in args.strategies.split(",") if s.strip()] if args.strategies else None


def measured_profiles(paths: list[str]) -> list[Any]:
    """The step profiles of measured-step files (``--step``): each workload built on the meta device
    (:func:`dpbench.strategies.layout.meta_layout`) unless the file states ``parameter_count``."""
    from dpbench.predict.measured import measured_profile, read_step_file
    from dpbench.strategies.layout import meta_layout

    out = []
    for path in paths:
        step = read_step_file(path)
        layout = None
        if step.workload is not None and step.parameter_count is None:
            try:
                layout = meta_layout(step.workload)
            except ValueError as exc:
                raise UsageError(f"{step.source}: workload: {exc}") from None
        elif step.workload is not None:
            raise UsageError(
                f"{step.source}: parameter_count: expected a workload spec or a parameter count, found both"
            )
        out.append(measured_profile(step, layout=layout))
    return out


def _predict_measured(args: argparse.Namespace) -> int:
    from dpbench.predict import run_collective_model
    from dpbench.predict.forecast import select_profiles
    from dpbench.predict.measured import measured_forecast

    if args.sources or args.check or args.min_bytes or args.from_world_size or args.threads_per_rank:
        raise UsageError(
            "--from/--check/--min-bytes/--from-world-size/--threads-per-rank: not for --step (a measured step "
            "gives its own world size); the collectives go in --collectives FILE"
        )
    worlds = int_list(args.world_sizes, "--world-sizes")
    profiles = select_profiles(measured_profiles(args.step), _strategies(args))
    model = run_collective_model(
        None, collectives=args.collectives, link=args.link, gpus_per_node=args.gpus_per_node, collective=args.collective
    )
    forecast = measured_forecast(
        profiles,
        model,
        worlds,
        scaling=args.scaling,
        overlap=_overlap(args),
        source=", ".join(args.step),
        accumulation=args.accumulation,
    )
    return _answer(args, forecast)


def _predict_run(args: argparse.Namespace) -> int:
    from dpbench.predict import (
        run_collective_model,
        step_predictions,
    )

    run = _resolve_target(args)
    if args.sources or args.check or args.min_bytes:
        raise UsageError("--from/--check/--min-bytes: only for TARGET collectives; for a run use --collectives FILE")
    worlds = int_list(args.world_sizes, "--world-sizes")
    model = run_collective_model(
        run,
        collectives=args.collectives,
        link=args.link,
        gpus_per_node=args.gpus_per_node,
        collective=args.collective,
    )
    overlap = _overlap(args)
    forecast = step_predictions(
        run,
        model,
        worlds,
        scaling=args.scaling,
        overlap=overlap,
        from_world_size=args.from_world_size,
        threads_per_rank=args.threads_per_rank,
        strategies=_strategies(args),
        accumulation=args.accumulation,
        memory=memory_estimator(args.memory),
        memory_kind=MEMORY_KINDS.get(args.memory, "not estimated"),
    )
    return _answer(args, forecast)


def _fraction(raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], found {raw!r}") from None


def register_predict(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "predict",
        help="predict collective times, or each strategy's step time, at other world sizes from measured ones",
        description="Fit a collective cost model (per collective and tier: inside a node, across nodes) on "
        "nccl-tests logs and saved comm-suite runs, by least squares on log time, and print it with its "
        "residual spread, then the predicted time per collective, message size and world size with a 95% "
        "interval, and the measured time and the error where that world size was measured. A tier with "
        "no measurements comes from --link. With a saved run as TARGET: every ddp, fsdp, zero and allreduce "
        "configuration's step replayed against that model at each world size (step time with its interval, "
        "samples/s, scaling efficiency, exposed communication, memory per rank) and the strategy to pick.",
        epilog=examples(
            "dpbench predict collectives --from nccl_2.log nccl_4.log nccl_8.log --collective all_reduce "
            "--world-sizes 16 --link inter=25GB/s --check nccl_16.log",
            "dpbench predict collectives --from results/Linux-CPython-3.12-64bit/0003_comm.json --world-sizes 2,4",
            "dpbench predict collectives --from all_gather_perf_2n.log --world-sizes 8,16,32 --json -",
            "dpbench predict 0002 --world-sizes 2,4 --from-world-size 1",
            "dpbench predict --step resnet50.toml --world-sizes 8,16 --gpus-per-node 8 "
            "--link intra=150GB/s,inter=100Gb/s",
            "dpbench predict results/run.json --world-sizes 8,16 --gpus-per-node 8 --collectives nccl_8.log "
            "--link inter=25GB/s",
        ),
        formatter_class=ExamplesFormatter,
    )
    p.add_argument(
        "target",
        metavar="TARGET",
        nargs="?",
        help=f"what to predict: collectives, or a saved run ({RUN_HELP}); none with --step",
    )
    p.add_argument(
        "--step",
        nargs="+",
        metavar="FILE",
        help="instead of a run: steps measured anywhere, one TOML file each (workload, strategy, world_size, "
        "per_rank_batch, step_time_s, and what else is known; see docs/predict.md)",
    )
    p.add_argument(
        "--strategies",
        metavar="LIST",
        help="a run or --step: only these configurations (labels or strategies, comma-separated: ddp,fsdp)",
    )
    p.add_argument(
        "--from",
        dest="sources",
        nargs="+",
        metavar="FILE",
        help="nccl-tests logs and saved comm-suite runs (.json), any mix",
    )
    p.add_argument(
        "--check",
        nargs="+",
        metavar="FILE",
        help="measurements held out of the fit: shown beside the predictions with the error",
    )
    p.add_argument("--world-sizes", required=True, metavar="LIST", help="comma-separated world sizes to predict")
    p.add_argument(
        "--gpus-per-node",
        type=positive_int,
        metavar="G",
        help="GPUs per node (default: the most ranks on one node measured)",
    )
    p.add_argument(
        "--link",
        metavar="SPEC",
        help=LINK_HELP,
    )
    p.add_argument(
        "--collective",
        metavar="NAME",
        help="the collective of logs whose header and file name do not say (all_reduce, all_gather, ...)",
    )
    p.add_argument(
        "--min-bytes", metavar="SIZE", help="fit only messages of at least SIZE (1MiB, 65536); predict every size"
    )
    p.add_argument(
        "--collectives",
        nargs="+",
        metavar="FILE",
        help="a run: the collective measurements (nccl-tests logs, comm-suite runs; default: the run's own)",
    )
    p.add_argument(
        "--scaling",
        choices=("weak", "strong"),
        default="weak",
        help="a run: weak keeps the per-rank batch, strong the global batch (default: weak)",
    )
    p.add_argument(
        "--accumulation",
        choices=("count", "micro-batch"),
        default="count",
        help="a run or --step, strong scaling with accumulation_steps: count keeps the measured micro-batches "
        "per step, micro-batch the measured micro-batch size (fewer per rank as ranks grow) (default: count)",
    )
    p.add_argument(
        "--from-world-size",
        type=positive_int,
        metavar="N",
        help="a run: predict from its cases at N ranks (default: the smallest measured per configuration)",
    )
    p.add_argument(
        "--overlap-slowdown",
        type=_fraction,
        metavar="F",
        help="a run: compute runs at 1-F of its speed while a collective runs (default: measured from the "
        "run's multi-rank ddp cases, else stated by device)",
    )
    p.add_argument(
        "--threads-per-rank",
        type=positive_int,
        metavar="T",
        help="a run: CPU threads each rank will compute with, where ranks share a host's cores (default: "
        "as measured); compute scales linearly with them",
    )
    p.add_argument(
        "--memory",
        choices=MEMORY,
        default="state",
        help="a run: memory per rank from the estimator — state: what a rank holds between steps (default), "
        "peak: with one forward + backward on top (slower), off",
    )
    add_results_dir(p)
    p.add_argument("--json", metavar="FILE", help="write the fits and predictions as JSON (-: to stdout)")
    p.set_defaults(handler=_predict)


def _answer(args: argparse.Namespace, forecast: Any) -> int:
    """The forecast as JSON (``--json FILE``, ``-`` for stdout alone) and as the table; exit 0."""
    from dpbench.predict import format_steps, steps_document

    if args.json:
        write_json(args.json, steps_document(forecast))
        if args.json == "-":
            return 0
    sys.stdout.write(format_steps(forecast))
    return 0
