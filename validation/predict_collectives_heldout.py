"""Validate the collective model across nodes on held-out nccl-tests logs, beside two naive baselines.

Fit on the all_reduce logs at 1, 2, 4 and 8 GPUs (one node) and predict 16 GPUs (two nodes) at
every size ≥ 1 MiB the 16-GPU log measured, twice:

- ``line rate``: the link between nodes as the hardware states it (``--link inter=25GB/s``, each
  GPU's 200 Gb/s InfiniBand), nothing of the 16-GPU log seen;
- ``one two-node row``: the bus bandwidth of one row of the 16-GPU log stated
  (``--link inter-busbw=…``, the 1 GiB row's out-of-place busbw); that row is left out of the errors.

Each fit is made over every size and over the sizes ≥ 1 MiB. Beside each prediction's error, the
baselines' at the same sizes:

- ``unchanged``: the largest world size measured (8 GPUs) at the same size, as if nothing changed
  (beyond its largest size, its time there scaled with the size);
- ``line rate, no latency``: the bus factor × size ÷ the stated bus bandwidth (8 × 25 GB/s, or the
  stated row's), no latency at all.

``--beyond LOG...`` adds the check the inter tier's hop latency is for: fit on 1–16 GPUs (the
16-GPU log fits the inter tier) and predict the larger logs given (32, 64, 128 GPUs), with the
16-GPU log's time unchanged and its bus bandwidth with no latency as the baselines.

    python -m validation.predict_collectives_heldout [--data tests/predict/data] [--beyond LOG ...] [--json out]

The medians and worsts are of |predicted − measured| / measured; a model that does not beat a
baseline's median says so.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dpbench.predict.collectives import fit_collectives
from dpbench.predict.measurements import Measurement, read_measurements
from dpbench.predict.model import bus_factor, parse_link

MIB = 1 << 20
DATA = Path(__file__).resolve().parent.parent / "tests" / "predict" / "data"
LINE_RATE = "inter=25GB/s"  # the README's 200 Gb/s InfiniBand per GPU
STATED_ROW = 1 << 30  # the 16-GPU log's row whose bus bandwidth the second reading states


@dataclass(kw_only=True, frozen=True)
class Row:
    """One held-out size: the measured time, the model's and the baselines' predictions."""

    bytes: int
    world_size: int
    measured_us: float
    predicted_us: float
    basis: str
    algorithm: str
    baselines_us: dict[str, float]

    def error(self, predicted: float) -> float:
        return predicted / self.measured_us - 1.0


@dataclass(kw_only=True, frozen=True)
class Reading:
    """One fit and its predictions of one held-out log, with the summary of each predictor."""

    name: str
    link: str | None
    fit_min_bytes: int
    world_size: int
    rows: tuple[Row, ...]
    origin: str

    def summary(self) -> dict[str, dict[str, float]]:
        """{predictor: {median, worst}} of |error| over the rows (the model first)."""
        out = {"model": _stats([abs(r.error(r.predicted_us)) for r in self.rows])}
        for name in self.rows[0].baselines_us:
            out[name] = _stats([abs(r.error(r.baselines_us[name])) for r in self.rows])
        return out

    def verdicts(self) -> list[str]:
        """Per baseline, whether the model's median beats it, in words."""
        s = self.summary()
        model = s["model"]["median"]
        lines = []
        for name, stats in s.items():
            if name == "model":
                continue
            beats = model < stats["median"]
            lines.append(
                f"{'beats' if beats else 'does NOT beat'} {name}: median {model:.1%} against {stats['median']:.1%}"
                f" (worst {s['model']['worst']:.1%} against {stats['worst']:.1%})"
            )
        return lines


def _stats(errors: list[float]) -> dict[str, float]:
    return {"median": statistics.median(errors), "worst": max(errors), "sizes": len(errors)}


def _busbw_gbps(m: Measurement) -> float:
    return bus_factor(m.collective, m.world_size) * m.bytes / m.time_us / 1e3


def _unchanged(largest: list[Measurement], nbytes: int) -> float:
    """The largest world size's time at ``nbytes``; beyond its largest size, that time scaled by size."""
    by_size = {m.bytes: m.time_us for m in largest}
    if nbytes in by_size:
        return by_size[nbytes]
    top = max(by_size)
    return by_size[top] * nbytes / top


def reading(
    name: str,
    *,
    fit_on: list[Measurement],
    held_out: list[Measurement],
    link: str | None,
    min_bytes: int,
    line_busbw_gbps: float,
    leave_out: int | None = None,
) -> Reading:
    """Fit on ``fit_on`` (sizes ≥ ``min_bytes``) with ``link``; predict every held-out size ≥ 1 MiB."""
    model = fit_collectives([m for m in fit_on if m.bytes >= min_bytes], link=parse_link(link) if link else None)
    largest_world = max(m.world_size for m in fit_on)
    largest = [m for m in fit_on if m.world_size == largest_world]
    rows = []
    for m in held_out:
        if m.bytes < MIB or m.bytes == leave_out:
            continue
        p = model.predict(m.collective, m.bytes, m.world_size)
        line = bus_factor(m.collective, m.world_size) * m.bytes / 1e3 / line_busbw_gbps
        rows.append(
            Row(
                bytes=m.bytes,
                world_size=m.world_size,
                measured_us=m.time_us,
                predicted_us=p.time_us,
                basis=p.basis.value,
                algorithm=p.algorithm,
                baselines_us={f"unchanged ({largest_world} GPUs)": _unchanged(largest, m.bytes), "line rate": line},
            )
        )
    world = held_out[0].world_size
    return Reading(
        name=name,
        link=link,
        fit_min_bytes=min_bytes,
        world_size=world,
        rows=tuple(rows),
        origin=model.tier(held_out[0].collective, world).origin,
    )


def readings(data: Path = DATA, beyond: list[Path] | None = None) -> list[Reading]:
    """Every reading: 16 from 1–8 with the line rate and with one stated row, each fit over every
    size and over ≥ 1 MiB; then, for each log in ``beyond``, that log from 1–16."""
    one_node = read_measurements([data / f"nccl_{n}.log" for n in (1, 2, 4, 8)], collective="all_reduce")
    sixteen = read_measurements([data / "nccl_16.log"], collective="all_reduce")
    row = next(m for m in sixteen if m.bytes == STATED_ROW)
    stated = f"inter-busbw={_busbw_gbps(row):.2f}GB/s"
    line = parse_link(LINE_RATE).inter_gbps * max(m.ranks_per_node for m in one_node)
    out = []
    for min_bytes in (0, MIB):
        out.append(
            reading(
                "16 from 1-8, line rate",
                fit_on=one_node,
                held_out=sixteen,
                link=LINE_RATE,
                min_bytes=min_bytes,
                line_busbw_gbps=line,
            )
        )
        out.append(
            reading(
                f"16 from 1-8, the 1 GiB row of nccl_16.log stated ({stated})",
                fit_on=one_node,
                held_out=sixteen,
                link=stated,
                min_bytes=min_bytes,
                line_busbw_gbps=_busbw_gbps(row),
                leave_out=STATED_ROW,
            )
        )
    for path in beyond or []:
        more = read_measurements([path], collective="all_reduce")
        best = max(_busbw_gbps(m) for m in sixteen)
        for min_bytes in (0, MIB):
            out.append(
                reading(
                    f"{more[0].world_size} from 1-16",
                    fit_on=one_node + sixteen,
                    held_out=more,
                    link=None,
                    min_bytes=min_bytes,
                    line_busbw_gbps=best,
                )
            )
    return out


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20)):
        if nbytes >= scale:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def format_reading(r: Reading) -> str:
    """The reading as text: what was fitted, the error per size, the summaries and the verdicts."""
    fit = "every size" if not r.fit_min_bytes else f"sizes ≥ {_size(r.fit_min_bytes)}"
    lines = [f"== {r.name}; fit on {fit}", f"   inter tier: {r.origin}"]
    names = list(r.rows[0].baselines_us)
    lines.append(f"   {'size':>8} {'measured µs':>12} {'model':>8} {'basis':>8} " + " ".join(f"{n:>18}" for n in names))
    for row in r.rows:
        cells = " ".join(f"{row.error(row.baselines_us[n]):>+18.1%}" for n in names)
        lines.append(
            f"   {_size(row.bytes):>8} {row.measured_us:>12.4g} {row.error(row.predicted_us):>+8.1%} "
            f"{row.algorithm:>8} {cells}"
        )
    for name, s in r.summary().items():
        lines.append(f"   {name}: median |error| {s['median']:.1%}, worst {s['worst']:.1%} over {s['sizes']} sizes")
    lines += [f"   model {v}" for v in r.verdicts()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA, help="the folder of nccl_1.log … nccl_16.log")
    parser.add_argument("--beyond", type=Path, nargs="*", default=[], help="larger logs to predict from 1–16")
    parser.add_argument("--json", help="write every reading as JSON here")
    args = parser.parse_args(argv)
    got = readings(args.data, args.beyond)
    sys.stdout.write("\n\n".join(format_reading(r) for r in got) + "\n")
    if args.json:
        doc: list[dict[str, Any]] = [{**asdict(r), "summary": r.summary(), "verdicts": r.verdicts()} for r in got]
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
