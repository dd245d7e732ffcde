"""``Run.trace``'s parent side: what a traced call returns, and the worker entry point it runs."""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["TraceResult", "trace_run"]


@dataclass(kw_only=True, frozen=True)
class TraceResult:
    """The files a traced call wrote and the steps it ran, or why the run cannot be traced.

    ``files``: one gzipped Kineto trace per rank (``rank<r>.json.gz``), rank order.
    ``memory_files``: CUDA memory snapshots of the last recorded step (empty on CPU).
    ``step_times``: per traced step (warm-up steps first), the slowest rank's seconds — the same
    clock as :meth:`Run.step`, so traced ÷ untraced step time is the profiler's overhead.
    ``warmup``: how many of ``step_times`` are the profiler's warm-up (not in the trace).
    """

    files: list[Path] = field(default_factory=list)
    memory_files: list[Path] = field(default_factory=list)
    step_times: list[float] = field(default_factory=list)
    warmup: int = 0
    skip_reason: str | None = None

    @property
    def active_step_times(self) -> list[float]:
        return self.step_times[self.warmup :]


def _check(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


def trace_run(run: Any, pool: Any, k: int, path: Any, *, warmup: int) -> TraceResult:
    """Trace ``k`` steps of ``run`` (after ``warmup`` profiler warm-up steps) into directory ``path``."""
    from dpbench.strategies import get_strategy

    _check("k", k, 1)
    _check("warmup", warmup, 0)
    if not isinstance(path, (str, Path)) or not str(path):
        raise ValueError(f"path must be the directory to write the traces into (str or Path), got {path!r}")
    reason = get_strategy(run.spec.strategy).trace_unavailable
    if reason is not None:
        return TraceResult(skip_reason=f"{run.spec.strategy} cannot be traced per rank: {reason}")
    directory = Path(path)
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"path must be a directory to write rank<r>.json.gz into, found a file: {directory}")
    per_rank = pool.run(_trace_worker, str(directory), int(k), int(warmup))
    return TraceResult(
        files=[Path(r["file"]) for r in per_rank],
        memory_files=[Path(r["memory_file"]) for r in per_rank if r["memory_file"]],
        # The slowest rank sets the pace of a synchronous step, as in Run.step.
        step_times=[max(times) for times in zip(*(r["times"] for r in per_rank))],
        warmup=int(warmup),
    )


def _trace_worker(ctx: Any, directory: str, k: int, warmup: int) -> dict[str, Any]:
    from dpbench.strategies.tracing import trace_steps

    return trace_steps(ctx.state["trainer"], directory=directory, active=k, warmup=warmup, heartbeat=ctx.heartbeat)
