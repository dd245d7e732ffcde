#!/usr/bin/env python
"""What tools/gpu-check asks of a saved run beyond "the suite passed".

    python -m tools.gpu_check_verify traces RUN.json [RUN.json ...]

``traces``: every traced case with two or more ranks has a per-rank breakdown in which each rank
spent time communicating (a trace that shows none has not measured what the step claims: on a
shared GPU that was gloo's host-side all-reduce going uncounted), and an arrival skew across its
ranks. One line per case; exit 1 when a case falls short or no such case was traced.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["traced_case_problems", "main"]


def traced_case_problems(benchmark: dict[str, Any]) -> tuple[str, list[str]] | None:
    """(the case's line, its problems) for a traced multi-rank case; None for any other benchmark."""
    info = benchmark.get("extra_info") or {}
    breakdown = info.get("trace_breakdown")
    world = info.get("world_size") or 1
    if not isinstance(breakdown, dict) or "skipped" in breakdown or world < 2:
        return None
    ranks = breakdown.get("ranks") or []
    problems = [f"trace problem: {p}" for p in breakdown.get("problems") or []]
    if len(ranks) != world:
        problems.append(f"{len(ranks)} rank trace(s) analysed, expected {world}")
    silent = [r["rank"] for r in ranks if not r.get("comm_s")]
    if silent:
        problems.append(f"no communication in the trace of rank(s) {silent}")
    if breakdown.get("skew") is None:
        problems.append("no collective matched across the ranks: no arrival skew")
    comm = ", ".join(f"{r.get('comm_s', 0) * 1e3:.3g}" for r in ranks)
    skew = breakdown.get("skew") or {}
    line = (
        f"{benchmark.get('name')}: communication {comm} ms/step per rank ({breakdown.get('comm_transport')} "
        f"transport), {skew.get('collectives', 0)} collectives matched, median skew "
        f"{(skew.get('median_skew_s') or 0) * 1e3:.3g} ms"
    )
    return line, problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["traces"])
    parser.add_argument("runs", nargs="+", type=Path)
    args = parser.parse_args(argv)
    checked = failed = 0
    for path in args.runs:
        for benchmark in json.loads(path.read_text()).get("benchmarks", []):
            found = traced_case_problems(benchmark)
            if found is None:
                continue
            line, problems = found
            checked += 1
            failed += bool(problems)
            print(f"{'FAIL' if problems else 'ok'} {line}" + "".join(f"\n    {p}" for p in problems))
    if not checked:
        print(f"no traced case with two or more ranks in {', '.join(map(str, args.runs))}")
        return 1
    print(f"traces: {checked - failed} of {checked} traced case(s) show communication on every rank")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
