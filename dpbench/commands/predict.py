"""``dpbench predict collectives``: a collective cost model fitted on nccl-tests logs and saved
comm-suite runs (plus a stated link), and its predictions at the world sizes asked for
(:mod:`dpbench.predict`)."""

from __future__ import annotations

import argparse
import re
import sys

from dpbench.commands.options import ExamplesFormatter, check_choice, examples, positive_int
from dpbench.errors import UsageError
from dpbench.results.console import write_json

__all__ = ["register_predict"]

TARGETS = ("collectives",)


def _ints(raw: str, option: str) -> list[int]:
    items = [v.strip() for v in raw.split(",") if v.strip()]
    if not items or not all(v.isdigit() and int(v) >= 1 for v in items):
        raise UsageError(f"{option}: expected comma-separated integers >= 1, found {raw!r}")
    return [int(v) for v in items]


_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "kb": 10**3, "mb": 10**6, "gb": 10**9}


def _size(raw: str) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", raw)
    if not m or m.group(2).lower() not in _UNITS:
        raise UsageError(f"--min-bytes: expected a size like 1MiB, 65536 or 4KiB, found {raw!r}")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def _predict(args: argparse.Namespace) -> int:
    from dpbench.predict import (
        fit_collectives,
        format_collectives,
        json_document,
        parse_link,
        predict_collectives,
        read_measurements,
    )

    check_choice("TARGET", args.target, TARGETS)
    worlds = _ints(args.world_sizes, "--world-sizes")
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


def register_predict(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "predict",
        help="predict collective times at other world sizes from measured ones (nccl-tests, the comm suite)",
        description="Fit a collective cost model (per collective and tier: inside a node, across nodes) on "
        "nccl-tests logs and saved comm-suite runs, by least squares on log time, and print it with its "
        "residual spread, then the predicted time per collective, message size and world size with a 95% "
        "interval, and the measured time and the error where that world size was measured. A tier with "
        "no measurements comes from --link.",
        epilog=examples(
            "dpbench predict collectives --from nccl_2.log nccl_4.log nccl_8.log --collective all_reduce "
            "--world-sizes 16 --link inter=25GB/s --check nccl_16.log",
            "dpbench predict collectives --from results/Linux-CPython-3.12-64bit/0003_comm.json --world-sizes 2,4",
            "dpbench predict collectives --from all_gather_perf_2n.log --world-sizes 8,16,32 --json -",
        ),
        formatter_class=ExamplesFormatter,
    )
    p.add_argument("target", metavar="TARGET", help="what to predict: collectives")
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
        "--link", metavar="SPEC", help="stated links, e.g. intra=450GB/s,inter=25GB/s,latency=10us (inter: per GPU)"
    )
    p.add_argument(
        "--collective",
        metavar="NAME",
        help="the collective of logs whose header and file name do not say (all_reduce, all_gather, ...)",
    )
    p.add_argument(
        "--min-bytes", metavar="SIZE", help="fit only messages of at least SIZE (1MiB, 65536); predict every size"
    )
    p.add_argument("--json", metavar="FILE", help="write the fits and predictions as JSON (-: to stdout)")
    p.set_defaults(handler=_predict)
