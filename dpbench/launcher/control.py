"""The control: a fixed, tiny computation every trial times in its own workers.

It runs on the same device with the same threads as the trial's benchmark, right after it, so
when a whole machine gets slower (a busy neighbour, a throttled GPU, a slow minute) the control
slows with it, while a slower commit leaves it alone. The gate and the report compare controls
to tell "the machine changed" from "the code changed".
"""
from __future__ import annotations

import statistics
import time
from typing import Any

__all__ = ["CONTROL_SPEC", "control_worker"]

# Never change these without bumping dpbench.schema.SCHEMA_VERSION: controls are compared across runs.
CONTROL_SPEC = {"op": "matmul", "size": 192, "chain": 8, "repeats": 5, "dtype": "float32"}


def control_worker(ctx: Any) -> float:
    """Median seconds of ``repeats`` timed chains of ``chain`` matmuls on this rank's device."""
    import torch

    device = ctx.device
    size, chain, repeats = CONTROL_SPEC["size"], CONTROL_SPEC["chain"], CONTROL_SPEC["repeats"]
    generator = torch.Generator().manual_seed(0)
    a = (torch.randn(size, size, generator=generator) / size**0.5).to(device)

    def sync() -> None:
        if a.is_cuda:
            # CUDA runs asynchronously: wait so the clock measures the matmuls, not their launch.
            torch.cuda.synchronize(device)

    times = []
    with torch.no_grad():
        x = a @ a  # warm-up: kernel selection and allocation are not part of the control
        sync()
        for _ in range(repeats):
            start = time.perf_counter()
            x = a
            for _ in range(chain):
                x = x @ a
            sync()
            times.append(time.perf_counter() - start)
    return statistics.median(times)
