"""One training step replayed on two streams: the compute stream and one communication stream.

A step is an ordered list of compute tasks (forward and backward pieces, the optimizer) and an
ordered list of collectives; each task may wait for events of the other stream (a bucket's
all-reduce waits for the backward piece that makes its gradients ready; FSDP's forward of a unit
waits for that unit's all-gather). Each stream runs its tasks in order, one at a time. While a
collective runs, compute advances at ``1 − overlap_slowdown`` of its speed: 0 is perfect overlap,
1 is a compute stream that stops while a collective runs (one CPU core doing both).

:func:`replay` returns when each task started and ended; the strategy schedules
(:mod:`dpbench.predict.step`) build the tasks.
"""

from __future__ import annotations

from dataclasses import dataclass

from dpbench.errors import UsageError

__all__ = ["COMM", "COMPUTE", "Replay", "Task", "replay"]

COMPUTE = "compute"
"""The compute stream."""
COMM = "comm"
"""The communication stream."""
_EPS = 1e-15


@dataclass(kw_only=True, frozen=True)
class Task:
    """One task on one stream: its undisturbed duration and the events it waits for."""

    name: str
    """What it is, for reading a replay: ``backward 2``, ``all_gather unit 3``."""
    seconds: float
    """Its duration alone, s (a collective's from the collective model; compute's as measured)."""
    after_start: tuple[tuple[str, int], ...] = ()
    """(stream, index) of tasks that must have *started* first (FSDP prefetches the next unit's
    all-gather when a unit's compute starts)."""
    after_end: tuple[tuple[str, int], ...] = ()
    """(stream, index) of tasks that must have *ended* first."""


@dataclass(kw_only=True, frozen=True)
class Replay:
    """When each task ran."""

    compute: tuple[tuple[float, float], ...]
    """(start, end) of each compute task, s from the step's start."""
    comm: tuple[tuple[float, float], ...]
    """(start, end) of each collective."""

    @property
    def end_s(self) -> float:
        """The step's end: the later stream's last end."""
        ends = [e for _, e in self.compute] + [e for _, e in self.comm]
        return max(ends, default=0.0)


def _ready(task: Task, started: dict[str, list[float | None]], ended: dict[str, list[float | None]]) -> bool:
    return all(started[s][i] is not None for s, i in task.after_start) and all(
        ended[s][i] is not None for s, i in task.after_end
    )


def replay(compute: list[Task], comm: list[Task], *, overlap_slowdown: float) -> Replay:
    """Run both streams to the end (see the module doc); a schedule that waits on itself is refused."""
    if not 0.0 <= overlap_slowdown <= 1.0:
        raise UsageError(f"overlap slowdown: expected a fraction in [0, 1], found {overlap_slowdown}")
    tasks = {COMPUTE: compute, COMM: comm}
    started: dict[str, list[float | None]] = {s: [None] * len(ts) for s, ts in tasks.items()}
    ended: dict[str, list[float | None]] = {s: [None] * len(ts) for s, ts in tasks.items()}
    nxt = {COMPUTE: 0, COMM: 0}
    running: dict[str, float | None] = {COMPUTE: None, COMM: None}  # work left of the running task
    t = 0.0
    while any(nxt[s] < len(tasks[s]) for s in tasks) or any(v is not None for v in running.values()):
        moved = True
        while moved:  # a start at t may free the other stream's next task at the same t
            moved = False
            for s in (COMM, COMPUTE):
                if running[s] is None and nxt[s] < len(tasks[s]) and _ready(tasks[s][nxt[s]], started, ended):
                    started[s][nxt[s]] = t
                    running[s] = max(0.0, tasks[s][nxt[s]].seconds)
                    moved = True
        progress = [v is not None for v in running.values()]
        if not any(progress):
            waiting = [tasks[s][nxt[s]].name for s in tasks if nxt[s] < len(tasks[s])]
            raise ValueError(f"schedule waits on itself: {', '.join(waiting)} can never start")
        rate = 1.0 - overlap_slowdown if running[COMM] is not None else 1.0
        steps = []
        if running[COMM] is not None:
            steps.append(running[COMM])
        if running[COMPUTE] is not None and rate > 0:
            steps.append(running[COMPUTE] / rate)
        dt = min(steps)
        t += dt
        for s, speed in ((COMM, 1.0), (COMPUTE, rate)):
            left = running[s]
            if left is None:
                continue
            left -= dt * speed
            if left <= _EPS * max(1.0, t):
                ended[s][nxt[s]] = t
                running[s] = None
                nxt[s] += 1
            else:
                running[s] = left
    return Replay(
        compute=tuple((float(a), float(b)) for a, b in zip(started[COMPUTE], ended[COMPUTE])),
        comm=tuple((float(a), float(b)) for a, b in zip(started[COMM], ended[COMM])),
    )
