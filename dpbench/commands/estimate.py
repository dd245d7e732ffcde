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
        "communication buffers), the peak of one forward + backward at the rank's batch beyond the gradients "
        "('beyond grads': activations, temporaries) and the "
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
    # No argparse default: a configuration's own precision or optimizer (fsdp@precision=bf16) is
    # refused only beside one given here.
    p.add_argument("--precision", metavar="P", help="fp32, bf16 or fp16 (default: fp32)")
    p.add_argument("--optimizer", metavar="O", help="sgd or adamw (default: sgd)")
    p.add_argument("--device-memory", metavar="SIZE", help="memory per device, e.g. 80GB, 80GiB, 8e10: adds fits")
    p.add_argument(
        "--cuda-capability",
        metavar="M.N",
        help="estimate for a GPU of this compute capability (9.0 for H100/H200): adds CUDA's library workspaces "
        "per rank, and fits leaves the GPU headroom (CUDA context, NCCL buffers, fragmentation)",
    )
    p.add_argument("--no-activations", action="store_true", help="state only: skip the forward + backward")
    p.add_argument("--json", metavar="FILE", help="write the estimates as JSON, byte counts as integers (-: stdout)")
    p.set_defaults(handler=_estimate)


def _fail(message: str) -> int:
    print(f"dpbench estimate: error: {message}", file=sys.stderr)
    return EXIT_INPUT


def _capability(raw: str) -> tuple[int, int]:
    major, dot, minor = raw.strip().partition(".")
    if not (major.isdigit() and dot and minor.isdigit()):
        raise ValueError(f"--cuda-capability: expected MAJOR.MINOR such as 9.0 or 8.6, found {raw!r}")
    return int(major), int(minor)


def _ints(raw: str, argument: str) -> tuple[int, ...]:
    items = [v.strip() for v in raw.split(",") if v.strip()]
    if not items or not all(v.isdigit() and int(v) >= 1 for v in items):
        raise ValueError(f"{argument}: expected comma-separated ints >= 1, found {raw!r}")
    return tuple(int(v) for v in items)


def _estimate(args: argparse.Namespace) -> int:
    import os
    from dataclasses import asdict

    from dpbench.launcher.fit import CUDA_HEADROOM
    from dpbench.schema import OPTIMIZERS, PRECISIONS
    from dpbench.strategies import get_strategy, list_strategies
    from dpbench.strategies.estimate import EstimateError, Estimator
    from dpbench.strategies.memory import parse_bytes
    from dpbench.strategies.workspaces import cuda_workspaces

    given = {key: getattr(args, key) for key in ("precision", "optimizer") if getattr(args, key) is not None}
    precision, optimizer = given.get("precision", "fp32"), given.get("optimizer", "sgd")
    try:
        check_choice("--precision", precision, PRECISIONS)
        check_choice("--optimizer", optimizer, OPTIMIZERS)
        device_memory = parse_bytes(args.device_memory, argument="--device-memory") if args.device_memory else None
        worlds = _ints(args.world_sizes, "--world-sizes") if args.world_sizes else DEFAULT_WORLD_SIZES
        cuda = cuda_workspaces(_capability(args.cuda_capability), os.environ) if args.cuda_capability else None
        configs = _configurations(args.strategies, list_strategies(), world_size=max(worlds), given=given)
        estimator = Estimator(args.workload, activations=not args.no_activations)
    except (ValueError, EstimateError) as exc:
        return _fail(str(exc))
    batch = args.global_batch or estimator.workload.global_batch or DEFAULT_GLOBAL_BATCH
    rows: list[dict[str, Any]] = []
    for config in configs:
        options = {"precision": precision, "optimizer": optimizer, **config.as_dict()}
        for world in worlds:
            try:
                case = estimator.case(config.strategy, world_size=world, global_batch=batch, options=options, cuda=cuda)
            except (ValueError, EstimateError) as exc:
                rows.append({"strategy": config.spec, "world_size": world, "refused": str(exc).splitlines()[0]})
                continue
            row = {**case.to_dict(), "strategy": config.spec}
            if cuda is not None:  # one worker per GPU; its ranks talk through NCCL when there are several
                nccl = get_strategy(config.strategy).multiprocess and world > 1
                row["headroom_bytes"] = CUDA_HEADROOM.bytes(case.need_bytes(), processes=1, nccl=nccl)
            if device_memory is not None:
                row["fits"] = case.need_bytes() + row.get("headroom_bytes", 0) <= device_memory
            rows.append(row)
    doc = {
        "workload": estimator.spec,
        "parameter_count": estimator.parameter_count,
        "global_batch": batch,
        "precision": precision,
        "optimizer": optimizer,
        "device_memory_bytes": device_memory,
        "cuda_workspaces": None if cuda is None else cuda.to_dict(),
        "headroom": None if cuda is None else asdict(CUDA_HEADROOM),
        "cases": rows,
    }
    if args.json:
        from dpbench.results.console import write_json

        write_json(args.json, doc)
        if args.json == "-":
            return 0
    print(estimate_table(doc))
    return 0


def _configurations(raw: str | None, known: list[str], *, world_size: int, given: dict[str, Any]) -> tuple[Any, ...]:
    """``--strategies``: names or configurations as ``dpbench run`` takes them (``fsdp@checkpoint=true``),
    parsed once; an option a configuration names beside the same option given here is refused."""
    from dpbench.strategies.configs import merge_options, parse_configs
    from dpbench.workloads.spec_syntax import split_specs

    items = split_specs(raw) if raw else tuple(known)
    check_names("--strategies", ",".join(item.partition("@")[0] for item in items) or (raw or ""), known)
    configs = parse_configs("--strategies", items, world_size=world_size)
    for config in configs:
        for key, value in given.items():
            merge_options(config.spec, config.as_dict(), {key: value}, given_as=f"--{key}")
    return configs


def estimate_table(doc: dict[str, Any]) -> str:
    """The estimates as a text table: the largest worker of each case, one row per strategy × world size."""
    from dpbench.strategies.memory import format_bytes

    fits = doc["device_memory_bytes"] is not None
    cuda = doc.get("cuda_workspaces")
    keys = ["params_bytes", "grads_bytes", "optimizer_state_bytes", "comm_buffer_bytes"]
    keys += (["workspace_bytes"] if cuda else []) + ["activation_bytes"]
    head = ["strategy", "world", "params", "grads", "optim", "buffers"] + (["wksp."] if cuda else [])
    head += ["beyond grads", "peak"] + (["fits"] if fits else [])
    lines = [head]
    for row in doc["cases"]:
        if "refused" in row:
            lines.append([row["strategy"], str(row["world_size"]), f"refused: {row['refused']}"])
            continue
        worst = max(row["ranks"], key=lambda r: r["peak_bytes"] or 0)
        cells = [row["strategy"], str(row["world_size"])]
        for key in keys:
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
    if cuda:
        text.append(_gpu_line(cuda, doc["headroom"], fits))
    for line in lines:
        if len(line) != len(head):
            text.append("  ".join(cell.ljust(w) for cell, w in zip(line[:2], widths)) + "  " + line[2])
        else:
            text.append(
                "  ".join(cell.rjust(w) if i >= 2 else cell.ljust(w) for i, (cell, w) in enumerate(zip(line, widths)))
            )
    return "\n".join(text)


def _gpu_line(cuda: dict[str, Any], headroom: dict[str, Any], fits: bool) -> str:
    """What a GPU adds, from the JSON's own values: the workspaces per device and the fit's headroom."""
    from dpbench.strategies.memory import format_bytes

    line = (
        f"for a GPU of capability {'.'.join(map(str, cuda['capability']))}: CUDA workspaces "
        f"{format_bytes(cuda['per_device_bytes'])} per device ({cuda['handles']} handles x "
        f"(cuBLAS {format_bytes(cuda['cublas_bytes'])} + cuBLASLt {format_bytes(cuda['cublaslt_bytes'])}))"
    )
    if fits:
        line += (
            f"; fits leaves headroom: CUDA context {format_bytes(headroom['context_bytes'])}, NCCL buffers "
            f"{format_bytes(headroom['nccl_bytes'])} (several processes), fragmentation "
            f"{headroom['fragmentation']:.0%} of the peak"
        )
    return line
