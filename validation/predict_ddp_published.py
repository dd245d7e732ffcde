"""Validate the step model on GPU measurements no one here made: PyTorch's own DDP benchmark
(``benchmarks/distributed/ddp`` in pytorch/pytorch, its README's example output; copied as numbers
in ``tests/predict/data/pytorch-ddp-benchmark/``): four torchvision CNNs, batch 32 per GPU, on
1–16 V100s (DGX-1: NVLink inside a machine, 4 × 100 Gb/s InfiniBand per machine of 8 GPUs).

From each model's one-GPU step without DDP (``ddp=no``) and the hardware as published — nothing
fitted to the rows predicted — it predicts the 20 ``ddp=yes`` rows (1, 2, 4, 8 GPUs on one
machine, 16 on two) and reports each error beside the naive baselines': the one-GPU step
unchanged, and a line-rate all-reduce of every gradient after backward (no overlap). Then the
direction of ``bucket_cap_mb=1`` against 25 at 8 and 16 GPUs, against the published change.

What it states, and why:

- **the links** (:data:`LINK`): inside a machine each V100 has 6 NVLinks of 25 GB/s per direction
  (150 GB/s, the hardware's figure, no hop latency stated); across machines each GPU's share of
  the 4 × 100 Gb/s NICs (50 Gb/s), so a ring across two machines reaches 8 × 50 Gb/s = 50 GB/s;
- **the parameters**: torchvision's layer order for each model (:func:`torchvision_sizes`: conv1,
  bn1, per bottleneck conv1, bn1, conv2, bn2, conv3, bn3, then its downsample, and fc last), whose
  sums are the table's parameter counts exactly (checked); fp32 gradients;
- **DDP's buckets as PyTorch 1.4 cut them** (:func:`torch14_buckets`): assigned in the order the
  parameters are defined (the small 1 MiB first bucket holds the first-defined ones, a bucket
  closes once it reaches its cap), then reversed (the order backward makes them ready); 1.4 had
  no bucket rebuild;
- **the compute**: the ``ddp=no`` step, split backward = 2 × forward, no optimizer apart (the
  benchmark times the whole step); a bucket is ready when backward has produced its share of the
  bytes; compute does not slow while a collective runs (the stated GPU overlap, 0).

    python -m validation.predict_ddp_published [--data DIR] [--json out.json]
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import statistics
import sys
from pathlib import Path
from typing import Any

LINK = "intra=150GB/s,inter=50Gb/s"
"""The DGX-1 links as published: 6 NVLinks × 25 GB/s per V100; each GPU's share of 4 × 100 Gb/s IB."""
GPUS_PER_NODE = 8
DEFAULT_DATA = Path(__file__).resolve().parents[1] / "tests" / "predict" / "data" / "pytorch-ddp-benchmark"
FIRST_BUCKET_BYTES = 1 << 20  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
MODELS = {
    # name: (blocks per stage, groups, width per group): torchvision's constructors
    "resnet50": ((3, 4, 6, 3), 1, 64),
    "resnet101": ((3, 4, 23, 3), 1, 64),
    "resnext50_32x4d": ((3, 4, 6, 3), 32, 4),
    "resnext101_32x8d": ((3, 4, 23, 3), 32, 8),
}
HF_SPECS = {
    "resnet50": "hf:resnet@num_labels=1000",
    "resnet101": "hf:resnet@num_labels=1000,depths=3x4x23x3",
}
"""With ``--meta``: the ResNets as transformers' ResNet configs build them on the meta device (the same
parameter counts, in transformers' layer order)."""


def torchvision_sizes(depths: tuple[int, ...], groups: int, width_per_group: int, classes: int = 1000) -> list[int]:
    """Each parameter's element count in the order torchvision's bottleneck ResNet defines them."""
    out = [64 * 3 * 7 * 7, 64, 64]
    inplanes = 64
    for planes, blocks in zip((64, 128, 256, 512), depths):
        for b in range(blocks):
            width = int(planes * (width_per_group / 64.0)) * groups
            out += [width * inplanes, width, width, width * (width // groups) * 9, width, width]
            out += [planes * 4 * width, planes * 4, planes * 4]
            if b == 0:  # the first block of a stage changes the channels: a 1×1 downsample and its norm
                out += [planes * 4 * inplanes, planes * 4, planes * 4]
            inplanes = planes * 4
    return out + [classes * 2048, classes]


def torch14_buckets(sizes: list[int], *, cap_bytes: int) -> tuple[Any, ...]:
    """DDP's buckets in PyTorch 1.4 (see the module doc), in the order backward makes them ready."""
    from dpbench.predict.profile import GradientGroup

    cut: list[int] = []
    size = 0
    for nbytes in sizes:  # definition order: the first bucket's small cap goes to the first-defined
        size += nbytes
        if size >= (FIRST_BUCKET_BYTES if not cut else cap_bytes):
            cut.append(size)
            size = 0
    if size:
        cut.append(size)
    total, done, out = sum(cut), 0, []
    for size in reversed(cut):
        done += size
        out.append(GradientGroup(bytes=size, ready_fraction=done / total))
    return tuple(out)


SAME = 0.001
"""A change in throughput smaller than this is no direction (the table rounds to 0.1%)."""


def _direction(change: float) -> str:
    return "same" if abs(change) < SAME else ("slower" if change < 0 else "faster")


def read_rows(data: Path) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    with open(data / "step_times.csv", newline="") as fh:
        steps = list(csv.DictReader(fh))
    with open(data / "bucket_1mb_vs_25mb.csv", newline="") as fh:
        buckets = list(csv.DictReader(fh))
    return steps, buckets


def _layout(name: str, count: int, meta: bool) -> Any:
    from dpbench.strategies.layout import ParameterLayout, meta_layout

    if meta and name in HF_SPECS:
        layout = meta_layout(HF_SPECS[name])
    else:
        depths, groups, width = MODELS[name]
        sizes = tuple(4 * n for n in torchvision_sizes(depths, groups, width))
        layout = ParameterLayout(sizes=sizes, origin=f"torchvision's {name} layer order")
    if layout.param_bytes != 4 * count:
        raise ValueError(f"{name}: {layout.origin}: {layout.param_bytes // 4:,} parameters, the table {count:,}")
    return layout


def _profile(name: str, step_s: float, cap_mb: int, layouts: dict[str, Any]) -> Any:
    from dpbench.predict.measured import MeasuredStep, measured_profile

    layout = layouts[name]
    sizes = list(layout.sizes)
    step = MeasuredStep(
        workload=name,
        strategy=f"ddp@bucket_cap_mb={cap_mb},broadcast_buffers=false",
        world_size=1,
        per_rank_batch=32,
        step_time_s=step_s,
        device="cuda",
        source=f"{name} ddp=no",
    )
    profile = measured_profile(step, layout=layout)
    return dataclasses.replace(profile, buckets=torch14_buckets(sizes, cap_bytes=cap_mb << 20))


def validate(data: Path = DEFAULT_DATA, *, meta: bool = False) -> dict[str, Any]:
    """Every prediction, its errors and the baselines', and the bucket directions; ``meta``: the
    ResNets' parameters from transformers' configs on the meta device (:data:`HF_SPECS`)."""
    from dpbench.predict import fit_collectives, parse_link, predict_step
    from dpbench.predict.step import stated_overlap

    steps, bucket_rows = read_rows(data)
    model = fit_collectives([], link=parse_link(LINK), gpus_per_node=GPUS_PER_NODE)
    overlap = stated_overlap("cuda")
    base = {r["model"]: r for r in steps if r["ddp"] == "no"}
    layouts = {name: _layout(name, int(r["parameters"]), meta) for name, r in base.items()}
    rows = []
    for r in (r for r in steps if r["ddp"] == "yes"):
        name, n, measured = r["model"], int(r["gpus"]), float(r["p50_s"])
        one = float(base[name]["p50_s"])
        profile = _profile(name, one, int(r["bucket_cap_mb"]), layouts)
        predicted = predict_step(profile, model, n, overlap=overlap).step_time_s
        line_rate = one + model.time_us("all_reduce", profile.param_bytes, n) / 1e6
        rows.append(
            {
                "model": name,
                "gpus": n,
                "measured_s": measured,
                "predicted_s": predicted,
                "error": predicted / measured - 1,
                "unchanged_error": one / measured - 1,
                "line_rate_error": line_rate / measured - 1,
            }
        )
    directions = []
    for r in bucket_rows:
        n = int(r["gpus"])
        if n not in (8, 16):
            continue
        one = float(base[r["model"]]["p50_s"])
        small, large = (
            predict_step(_profile(r["model"], one, cap, layouts), model, n, overlap=overlap).step_time_s
            for cap in (1, 25)
        )
        measured_change = float(r["p75_change_vs_25mb_pct"]) / 100  # throughput, 1 MB against 25 MB
        predicted_change = large / small - 1
        directions.append(
            {
                "model": r["model"],
                "gpus": n,
                "measured_change": measured_change,
                "predicted_change": predicted_change,
                "right": _direction(measured_change) == _direction(predicted_change),
            }
        )

    def med(key: str) -> float:
        return statistics.median(abs(row[key]) for row in rows)

    return {
        "link": LINK,
        "parameters": {name: layout.origin for name, layout in layouts.items()},
        "gpus_per_node": GPUS_PER_NODE,
        "rows": rows,
        "median_abs_error": med("error"),
        "median_abs_error_unchanged": med("unchanged_error"),
        "median_abs_error_line_rate": med("line_rate_error"),
        "worst_abs_error": max(abs(row["error"]) for row in rows),
        "directions": directions,
        "directions_right": sum(d["right"] for d in directions),
    }


def format_result(result: dict[str, Any]) -> str:
    lines = [
        f"PyTorch's DDP benchmark (V100, DGX-1), predicted from each model's one-GPU step with --link {result['link']}",
        f"{'model':<18}{'gpus':>5}{'measured':>10}{'predicted':>11}{'error':>8}{'unchanged':>11}{'line rate':>11}",
    ]
    for r in result["rows"]:
        lines.append(
            f"{r['model']:<18}{r['gpus']:>5}{r['measured_s'] * 1e3:>8.1f}ms{r['predicted_s'] * 1e3:>9.1f}ms"
            f"{r['error']:>+8.1%}{r['unchanged_error']:>+11.1%}{r['line_rate_error']:>+11.1%}"
        )
    lines.append(
        f"median |error|: model {result['median_abs_error']:.1%}, "
        f"unchanged {result['median_abs_error_unchanged']:.1%}, "
        f"line rate (no overlap) {result['median_abs_error_line_rate']:.1%}; worst {result['worst_abs_error']:.1%}"
    )
    lines.append("bucket_cap_mb=1 against 25 (throughput change): measured, predicted")
    for d in result["directions"]:
        mark = "right" if d["right"] else "wrong"
        lines.append(
            f"  {d['model']:<18} w{d['gpus']:<3} {d['measured_change']:+.1%} ({_direction(d['measured_change'])})  "
            f"{d['predicted_change']:+.2%} ({_direction(d['predicted_change'])})  {mark}"
        )
    lines.append(f"direction right: {result['directions_right']} of {len(result['directions'])}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m validation.predict_ddp_published", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the directory of the two CSVs")
    parser.add_argument("--json", metavar="FILE", help="write the result as JSON")
    parser.add_argument(
        "--meta", action="store_true", help="the ResNets from transformers' ResNet configs on the meta device"
    )
    args = parser.parse_args(argv)
    result = validate(args.data, meta=args.meta)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    sys.stdout.write(format_result(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
