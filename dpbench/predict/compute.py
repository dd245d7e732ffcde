"""How a rank's compute grows with its batch: forward + backward = ``floor + per sample × batch``.

A step's forward and backward are kernels launched one after another; each costs a fixed part
(its launch, its latency, layers whose work does not depend on the batch) and a part that grows
with the samples it processes. On a GPU at a small batch the fixed parts dominate — the step is
launch-bound and nearly flat in the batch — so scaling the measured compute in proportion to the
per-rank batch (what strong scaling does) predicts small per-rank steps far too fast.

The form is affine, not ``max(floor, slope × batch)``: the fixed costs are paid at every batch,
beside the work that grows with it (a launch-bound step that overlaps its launches with the GPU's
work lies between the two, and the affine form is the slower of them); and it is what two per-rank
batches determine exactly, where a knee would need a third. It is fitted by non-negative least
squares (:func:`scipy.optimize.nnls`): neither a floor nor a per-sample cost below zero. Without
two per-rank batches measured on the same resources it is stated: linear, no floor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["ComputeFloor", "fit_floor", "linear_compute"]


@dataclass(kw_only=True, frozen=True)
class ComputeFloor:
    """A rank's forward + backward at any per-rank batch: ``floor_s + per_sample_s × batch``."""

    floor_s: float
    """The part that does not grow with the batch, s (0: linear)."""
    per_sample_s: float | None
    """What each sample adds, s; None: stated, not measured — the compute scales linearly."""
    batches: tuple[int, ...] = ()
    """The per-rank batches it was fitted on (empty: stated)."""
    origin: str
    """Measured: from which cases; stated: why nothing measured it."""

    @property
    def measured(self) -> bool:
        """Whether the run measured it (two per-rank batches or more)."""
        return self.per_sample_s is not None

    def scale(self, measured_batch: float, batch: float) -> float:
        """The compute at ``batch`` ÷ the compute at ``measured_batch``."""
        if self.per_sample_s is None or self.floor_s <= 0:
            return batch / measured_batch
        return (self.floor_s + self.per_sample_s * batch) / (self.floor_s + self.per_sample_s * measured_batch)


def linear_compute(reason: str) -> ComputeFloor:
    """The stated form: no floor, the compute in proportion to the per-rank batch; ``reason``: why
    nothing measured one."""
    return ComputeFloor(floor_s=0.0, per_sample_s=None, origin=reason)


def fit_floor(points: Sequence[tuple[int, float]], *, origin: str) -> ComputeFloor | None:
    """The floor and per-sample cost of (per-rank batch, forward + backward seconds) points, fitted by
    non-negative least squares (exact through two points that need neither clamped); None with
    fewer than two distinct batches."""
    import numpy as np
    from scipy.optimize import nnls

    batches = sorted({b for b, _ in points})
    if len(batches) < 2:
        return None
    design = np.array([[1.0, float(b)] for b, _ in points])
    seconds = np.array([float(s) for _, s in points])
    (floor, per_sample), _ = nnls(design, seconds)
    return ComputeFloor(floor_s=float(floor), per_sample_s=float(per_sample), batches=tuple(batches), origin=origin)
