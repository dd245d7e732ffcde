"""The control: a fixed computation every trial times in its own workers.

It runs on the same devices with the same threads as the trial's benchmark, right after it, so
when a whole machine gets slower (a busy neighbour, a throttled GPU, a slow minute) the control
slows with it, while a slower commit leaves it alone. The gate and the report compare controls
to tell "the machine changed" from "the code changed".

Sized per device type: on CPU a chain of small fp32 matmuls (:data:`CONTROL_SPEC`, unchanged
since schema 2); on CUDA a chain of large fp16 matmuls (:data:`CUDA_CONTROL_SPEC`) — 192² fp32
matmuls on a GPU would time kernel launches and the sync, not the SMs' clock state. fp16
tensor-core matmuls exist on every GPU from Volta on and do not depend on the user's TF32
settings. On CUDA the chain runs on every GPU the worker uses at once (in-process ``dp``
replicas on ``cuda:0..N-1``: all of them), and the time is until the last GPU is done.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

__all__ = ["CONTROL_SPEC", "CUDA_CONTROL_SPEC", "control_spec", "control_devices", "control_worker"]

# Never change these without bumping dpbench.schema.SCHEMA_VERSION: controls are compared across runs.
CONTROL_SPEC = {"op": "matmul", "size": 192, "chain": 8, "repeats": 5, "dtype": "float32"}
# 16 × 2·4096³ = 2.2 TFLOP per repeat: ~3 ms on an H100/H200, ~50 ms on a T4 — long against
# launch latency (~10 µs a kernel), short against a trial.
CUDA_CONTROL_SPEC = {"op": "matmul", "size": 4096, "chain": 16, "repeats": 5, "dtype": "float16"}


def control_spec(device_type: str) -> dict[str, Any]:
    """The control's shape on this device type (``"cpu"`` or ``"cuda"``)."""
    return CUDA_CONTROL_SPEC if device_type == "cuda" else CONTROL_SPEC


def control_devices(ctx: Any) -> list[Any]:
    """The distinct devices this worker's case computes on: the trainer's replicas' when a run is
    set up in it (several GPUs for in-process dp), else the worker's own device."""
    trainer = getattr(ctx, "state", {}).get("trainer")
    devices = trainer.local_devices() if trainer is not None else [ctx.device]
    return list(dict.fromkeys(str(d) for d in devices))


def _operand(size: int, dtype: Any, device: str) -> Any:
    import torch

    generator = torch.Generator().manual_seed(0)
    # Scaled so the chain's values stay O(1) (no overflow in fp16, no denormals).
    return (torch.randn(size, size, generator=generator) / size**0.5).to(device=device, dtype=dtype)


def control_worker(ctx: Any) -> float:
    """Median seconds of ``repeats`` timed chains of ``chain`` matmuls on this worker's devices."""
    import torch

    devices = control_devices(ctx)
    cuda = [d for d in devices if d.startswith("cuda")]
    spec = control_spec("cuda" if cuda else "cpu")
    dtype = getattr(torch, spec["dtype"])
    operands = [_operand(spec["size"], dtype, d) for d in (cuda or devices[:1])]

    def sync() -> None:
        # CUDA runs asynchronously: wait for every GPU so the clock measures the matmuls, not their launch.
        for device in cuda:
            torch.cuda.synchronize(device)

    def chain() -> None:
        for a in operands:  # queued on each GPU in turn: they run at the same time
            x = a
            for _ in range(spec["chain"]):
                x = x @ a

    times = []
    with torch.no_grad():
        for a in operands:
            a @ a  # warm-up: kernel selection and allocation are not part of the control
        sync()
        for _ in range(spec["repeats"]):
            start = time.perf_counter()
            chain()
            sync()
            times.append(time.perf_counter() - start)
    return statistics.median(times)
