"""Worker side of ``Run.trace``: a few more training steps under ``torch.profiler``, one gzipped
Chrome (Kineto) trace per rank.

Called only after a trial's timed rounds, so no timed step ever runs under the profiler. The
steps go through the same loop as timed ones (:meth:`Strategy.run_steps`: the same device
synchronisation at the step boundaries), with the profiler's schedule (``warmup`` steps, then
``active`` recorded ones), a ``ProfilerStep#N`` marker per step (``prof.step()``) and each phase
a ``dpbench:<phase>`` ``record_function`` label; multi-process ranks meet at a barrier
(``dpbench:align``) once recording has started. ``profile_memory=True`` records the allocator's
``[memory]`` events (the per-phase peaks of the analysis). On CUDA, the last recorded step also
gets a memory snapshot (``torch.cuda.memory._record_memory_history``), for
https://pytorch.org/memory_viz.

Each file is written beside its destination and renamed onto it once complete, so a reader
never sees half a trace.
"""

from __future__ import annotations

import gzip
import os
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["ALIGN_LABEL", "trace_steps", "trace_file_name", "memory_file_name"]

# Must match dpbench.traces.analysis.ALIGN_LABEL (the analysis cannot import strategies).
ALIGN_LABEL = "dpbench:align"


def trace_file_name(rank: int) -> str:
    return f"rank{rank}.json.gz"


def memory_file_name(rank: int) -> str:
    return f"rank{rank}.memory.pickle"


def _publish_gzipped(source: Path, target: Path) -> None:
    partial = target.with_name(f".{target.name}.partial")
    with open(source, "rb") as raw, gzip.open(partial, "wb", compresslevel=6) as packed:
        shutil.copyfileobj(raw, packed)
    os.replace(partial, target)
    source.unlink(missing_ok=True)


def trace_steps(
    trainer: Any, *, directory: str, active: int, warmup: int, heartbeat: Callable[[], None] | None = None
) -> dict[str, Any]:
    """Run ``warmup + active`` steps under the profiler; write this rank's trace into ``directory``.

    Returns this rank's step times (all steps, warm-up first), the trace file and, on CUDA, the
    memory snapshot file. The run's timed-peak memory is left as the timed steps set it.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    rank = trainer.rank
    target = out / trace_file_name(rank)
    memory_target = out / memory_file_name(rank) if trainer.cuda_devices else None
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if trainer.cuda_devices else [])

    def export(prof: Any) -> None:
        plain = out / f".rank{rank}.json.tmp"
        prof.export_chrome_trace(str(plain))
        _publish_gzipped(plain, target)

    total = warmup + active
    done = [0]
    kept_peak = dict(trainer.timed_peak)

    with profile(
        activities=activities,
        schedule=schedule(wait=0, warmup=warmup, active=active, repeat=1),
        on_trace_ready=export,
        profile_memory=True,
        record_shapes=False,
        with_stack=False,
    ) as prof:

        def after_step() -> None:
            done[0] += 1
            if memory_target is not None and done[0] == total - 1:
                # Untimed: history recording starts between steps, for the last recorded step.
                # Python stacks only: symbolising C++ frames at the dump can take seconds per snapshot.
                torch.cuda.memory._record_memory_history(max_entries=200_000, stacks="python")
            if memory_target is not None and done[0] == total:
                partial = memory_target.with_name(f".{memory_target.name}.partial")
                torch.cuda.memory._dump_snapshot(str(partial))
                torch.cuda.memory._record_memory_history(enabled=None)
                os.replace(partial, memory_target)
            prof.step()
            if done[0] == warmup and trainer.multiprocess:
                # The profiler starts recording inside that prof.step(), taking a different time on
                # each rank; without this barrier the first recorded step would start skewed by the
                # profiler's own start-up. Labelled so the analysis leaves it out of the step.
                import torch.distributed as dist

                with torch.profiler.record_function(ALIGN_LABEL):
                    dist.barrier(group=trainer.ctx.group)

        trainer.phases.labels = True
        try:
            with warnings.catch_warnings():
                # One recording cycle by design: torch's note that later cycles would drop it is noise here.
                warnings.filterwarnings("ignore", message="Profiler clears events", category=UserWarning)
                measured = trainer.run_steps(total, heartbeat=heartbeat, on_step=after_step)
        finally:
            trainer.phases.labels = False
    trainer.timed_peak.clear()
    trainer.timed_peak.update(kept_peak)  # traced steps are not timed steps
    if not target.is_file():
        raise RuntimeError(f"rank {rank}: the profiler wrote no trace to {target}")
    return {
        "times": measured["times"],
        "file": str(target),
        "memory_file": str(memory_target) if memory_target is not None else None,
    }
