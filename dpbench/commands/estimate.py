"""``dpbench estimate``: will it fit? Memory per rank for each strategy × world size, before any run.

The workload's model is built on the meta device and once under ``FakeTensorMode``
(:class:`dpbench.strategies.estimate.Estimator`): nothing real is allocated, so a
billion-parameter config is estimated in seconds on a laptop. Bad input is one line and exit 2.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from dpbench.commands.options import ExamplesFormatter, check_names, examples, positive_int
from dpbench.errors import check_choice

__all__ = ["register_estimate", "estimate_table"]

EXIT_INPUT = 2
DEFAULT_WORLD_SIZES = (1, 2, 4, 8)
DEFAULT_GLOBAL_BATCH = 32


def register_estimate(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "estimate",
        help="estimate memory per rank for each strategy and world size (nothing allocated, nothing launched)",
        description="Will it fit? Build the workload's model on the meta device and under FakeTensorMode and "
        "print, per strategy and world size, what each rank holds (parameters, gradients, optimizer state, "
        "communication buffers), the activation peak of one forward + backward at the rank's batch and the "
        "estimated peak; with --device-memory, whether it fits.",
        epilog=examples(
            "dpbench estimate --workload mlp",
            "dpbench estimate --workload hf:llama@num_hidden_layers=16,hidden_size=2048 --device-memory 80GiB",
            "dpbench estimate --workload transformer --strategies ddp,fsdp --optimizer adamw --json -",
        ),
        formatter_class=ExamplesFormatter,
    )
    p.add_argument("--workload", required=True, metavar="SPEC", help="a workload spec (name, MODULE:ATTR, hf:…)")
    p.add_argument("--strategies", metavar="LIST", help="comma-separated strategy names (default: all)")
    p.add_argument("--world-sizes", metavar="LIST", help="comma-separated world sizes (default: 1,2,4,8)")
    p.add_argument(
        "--global-batch", type=positive_int, metavar="N", help="samples per step (default: the spec's, else 32)"
    )
    p.add_argument("--precision", default="fp32", metavar="P", help="fp32, bf16 or fp16 (default: fp32)")
    p.add_argument("--optimizer", default="sgd", metavar="O", help="sgd or adamw (default: sgd)")
    p.add_argument("--device-memory", metavar="SIZE", help="memory per device, e.g. 80GB, 80GiB, 8e10: adds fits")
    p.add_argument("--no-activations", action="store_true", help="state only: skip the forward + backward")
    p.add_argument("--json", metavar="FILE", help="write the estimates as JSON, byte counts as integers (-: stdout)")
    p.set_defaults(handler=_estimate)


def _fail(message: str) -> int:
    print(f"dpbench estimate: error: {message}", file=sys.stderr)
    return EXIT_INPUT


def _ints(raw: str, argument: str) -> tuple[int, ...]:
    items = [v.strip() for v in raw.split(",") if v.strip()]
    if not items or not all(v.isdigit() and int(v) >= 1 for v in items):
        raise ValueError(f"{argument}: expected comma-separated ints >= 1, found {raw!r}")
    return tuple(int(v) for v in items)


def _estimate(args: argparse.Namespace) -> int:
    from dpbench.schema import OPTIMIZERS, PRECISIONS
    from dpbench.strategies import list_strategies
    from dpbench.strategies.estimate import EstimateError, Estimator
    from dpbench.strategies.memory import parse_bytes

    try:
        check_choice("--precision", args.precision, PRECISIONS)
        check_choice("--optimizer", args.optimizer, OPTIMIZERS)
        device_memory = parse_bytes(args.device_memory, argument="--device-memory") if args.device_memory else None
        worlds = _ints(args.world_sizes, "--world-sizes") if args.world_sizes else DEFAULT_WORLD_SIZES
        strategies = check_names("--strategies", args.strategies or ",".join(list_strategies()), list_strategies())
        estimator = Estimator(args.workload, activations=not args.no_activations)
    except (ValueError, EstimateError) as exc:
        return _fail(str(exc))
    batch = args.global_batch or estimator.workload.global_batch or DEFAULT_GLOBAL_BATCH
    options = {"precision": args.precision, "optimizer": args.optimizer}
    rows: list[dict[str, Any]] = []
    for strategy in strategies:
        for world in worlds:
            try:
                case = estimator.case(strategy, world_size=world, global_batch=batch, options=options)
            except (ValueError, EstimateError) as exc:
                rows.append({"strategy": strategy, "world_size": world, "refused": str(exc).splitlines()[0]})
                continue
            row = case.to_dict()
            if device_memory is not None:
                row["fits"] = case.need_bytes() <= device_memory
            rows.append(row)
    doc = {
        "workload": estimator.spec,
        "parameter_count": estimator.parameter_count,
        "global_batch": batch,
        "precision": args.precision,
        "optimizer": args.optimizer,
        "device_memory_bytes": device_memory,
        "cases": rows,
    }
    if args.json:
        from dpbench.results.console import write_json

        write_json(args.json, doc)
        if args.json == "-":
            return 0
    print(estimate_table(doc))
    return 0


def estimate_table(doc: dict[str, Any]) -> str:
    """The estimates as a text table: the largest worker of each case, one row per strategy × world size."""
    from dpbench.strategies.memory import format_bytes

    fits = doc["device_memory_bytes"] is not None
    head = ["strategy", "world", "params", "grads", "optim", "buffers", "activ.", "peak"] + (["fits"] if fits else [])
    lines = [head]
    for row in doc["cases"]:
        if "refused" in row:
            lines.append([row["strategy"], str(row["world_size"]), f"refused: {row['refused']}"])
            continue
        worst = max(row["ranks"], key=lambda r: r["peak_bytes"] or 0)
        cells = [row["strategy"], str(row["world_size"])]
        for key in ("params_bytes", "grads_bytes", "optimizer_state_bytes", "comm_buffer_bytes", "activation_bytes"):
            cells.append(format_bytes(worst[key]))
        cells.append(format_bytes(row["need_bytes"]))
        if fits:
            cells.append("yes" if row["fits"] else "no")
        lines.append(cells)
    widths = [max(len(line[i]) for line in lines if len(line) > i and len(line) == len(head)) for i in range(len(head))]
    text = [
        f"{doc['workload']}: {doc['parameter_count']:,} parameters, global batch {doc['global_batch']}, "
        f"{doc['precision']}, {doc['optimizer']}; per rank (the largest rank)"
        + (f", device memory {format_bytes(doc['device_memory_bytes'])}" if fits else "")
    ]
    for line in lines:
        if len(line) != len(head):
            text.append("  ".join(cell.ljust(w) for cell, w in zip(line[:2], widths)) + "  " + line[2])
        else:
            text.append(
                "  ".join(cell.rjust(w) if i >= 2 else cell.ljust(w) for i, (cell, w) in enumerate(zip(line, widths)))
            )
    return "\n".join(text)
