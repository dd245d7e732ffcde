"""PhaseTimer: seconds per phase of the timed steps, without host synchronisation inside them.

On CPU a phase is the host time between its two boundaries (work is eager). On CUDA each
boundary records CUDA events instead of synchronising: a ``torch.cuda.synchronize`` at every
phase boundary would stop the host from queueing the next phase while the device works, so the
step being timed would no longer be the step a user runs. The spans are read once, by
:meth:`PhaseTimer.resolve`, after the timed loop. (The one host sync left inside an fp16 step is
GradScaler's own found-inf read in the optimizer phase: see ``_precision.py``.)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["PhaseTimer"]


class PhaseTimer:
    """Accumulates seconds per phase; ``with timer(Phase.X): ...`` marks one span."""

    def __init__(self, cuda_devices: list[Any]):
        from dpbench.parallel.timing import cuda_indices

        self._cuda_devices = list(cuda_devices)
        self._indices = cuda_indices(cuda_devices) if cuda_devices else ()
        self._pending: list[tuple[str, Any, Any]] = []
        self._totals: dict[str, float] = {}
        # While a trace is recorded (strategies/tracing.py) each phase is also a
        # record_function label "dpbench:<phase>"; off otherwise, so timed steps carry no
        # profiler call at all.
        self.labels = False

    def sync(self) -> None:
        """Wait for every queued kernel on this worker's GPUs (a no-op on CPU).

        Only for step boundaries, outside the spans phases cover.
        """
        import torch

        for device in self._cuda_devices:
            torch.cuda.synchronize(device)

    @contextmanager
    def __call__(self, phase: Any) -> Iterator[None]:
        from dpbench.parallel.timing import mark

        label = None
        if self.labels:
            import torch

            label = torch.profiler.record_function(f"dpbench:{getattr(phase, 'value', phase)}")
            label.__enter__()
        start = mark(self._indices)
        try:
            yield
        finally:
            self.add_span(phase, start, mark(self._indices))
            if label is not None:
                label.__exit__(None, None, None)

    def add_span(self, phase: Any, start: Any, end: Any) -> None:
        """A span between two marks of :mod:`dpbench.parallel.timing` (read later on CUDA)."""
        self._pending.append((getattr(phase, "value", phase), start, end))

    def add_spans(self, spans: Iterable[tuple[str, Any, Any]]) -> None:
        for phase, start, end in spans:
            self.add_span(phase, start, end)

    def add(self, phase: Any, seconds: float) -> None:
        key = getattr(phase, "value", phase)
        self._totals[key] = self._totals.get(key, 0.0) + seconds

    def resolve(self) -> dict[str, float]:
        """Seconds per phase since the last :meth:`clear` (waits for CUDA events: call after timing)."""
        from dpbench.parallel.timing import span_seconds

        for phase, start, end in self._pending:
            self.add(phase, span_seconds(start, end))
        self._pending.clear()
        return dict(self._totals)

    def clear(self) -> None:
        self._pending.clear()
        self._totals.clear()

    @property
    def totals(self) -> dict[str, float]:
        return self.resolve()
