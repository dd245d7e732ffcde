"""Model FLOPs, peak FLOP/s, MFU, tokens/s, exposed communication and memory accounting.

Two halves:

* measuring (worker side, needs torch, imported lazily): :func:`count_step_flops` counts one
  forward + backward with ``torch.utils.flop_counter.FlopCounterMode`` (counted, not a formula,
  so it works for any :class:`dpbench.Workload`); :func:`measure_matmul_flops` measures a CPU's
  peak with a large matmul on the calling worker's threads; :func:`local_bytes` sums what
  tensors occupy on this rank (a DTensor counts its local shard only);
* peaks (pure, no torch): :func:`table_peak_flops` / :func:`peak_flops` pick a GPU's dense
  peak from :data:`PEAK_TFLOPS` or ``DPBENCH_PEAK_TFLOPS``.

:func:`dpbench.measure.derive.derive` turns these case metrics and a step time into MFU,
tokens/s and exposed communication.
"""
from __future__ import annotations

import math
import os
import threading
import time
from typing import Any, Callable, Mapping

__all__ = [
    "PEAK_TFLOPS",
    "PEAK_ENV",
    "count_step_flops",
    "measure_matmul_flops",
    "local_bytes",
    "table_peak_flops",
    "peak_flops",
]

PEAK_ENV = "DPBENCH_PEAK_TFLOPS"

# Dense (no 2:4 sparsity) peak TFLOP/s per GPU from NVIDIA's data sheets: (name pattern,
# {dtype: TFLOP/s}). fp32 is the plain FP32 rate (torch leaves TF32 matmuls off by default);
# bf16/fp16 are tensor-core rates with fp32 accumulation. The first pattern found in
# ``torch.cuda.get_device_name()`` wins, so specific names come before general ones.
PEAK_TFLOPS: tuple[tuple[str, dict[str, float]], ...] = (
    ("H100 PCIe", {"bf16": 756.0, "fp16": 756.0, "fp32": 51.0}),
    ("H100 NVL", {"bf16": 835.0, "fp16": 835.0, "fp32": 60.0}),
    ("GH200", {"bf16": 989.0, "fp16": 989.0, "fp32": 67.0}),
    ("H200", {"bf16": 989.0, "fp16": 989.0, "fp32": 67.0}),
    ("H100", {"bf16": 989.0, "fp16": 989.0, "fp32": 67.0}),  # SXM
    ("H800", {"bf16": 989.0, "fp16": 989.0, "fp32": 67.0}),
    ("A100", {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5}),
    ("A800", {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5}),
    ("L40S", {"bf16": 362.0, "fp16": 362.0, "fp32": 91.6}),
    ("L40", {"bf16": 181.0, "fp16": 181.0, "fp32": 90.5}),
    ("L4", {"bf16": 121.0, "fp16": 121.0, "fp32": 30.3}),
    ("A10", {"bf16": 125.0, "fp16": 125.0, "fp32": 31.2}),
    ("RTX 4090", {"bf16": 165.2, "fp16": 165.2, "fp32": 82.6}),
    ("RTX 3090", {"bf16": 71.0, "fp16": 71.0, "fp32": 35.6}),
    ("V100", {"fp16": 125.0, "fp32": 15.7}),  # no bf16 tensor cores
    ("T4", {"fp16": 65.0, "fp32": 8.1}),
)


# ---------------------------------------------------------------- measuring (worker side)
def count_step_flops(model: Any, inputs: Any, target: Any, loss: Callable[[Any, Any], Any], *,
                     autocast: Any = None) -> int:
    """FLOPs of one forward (incl. the loss) + backward of ``model`` on ``inputs``, as torch counts them."""
    import contextlib

    from torch.utils.flop_counter import FlopCounterMode

    from dpbench.strategies.base import call_model

    with FlopCounterMode(display=False) as counter:
        with autocast if autocast is not None else contextlib.nullcontext():
            value = loss(call_model(model, inputs), target)
        value.backward()
    return int(counter.get_total_flops())


def measure_matmul_flops(*, dtype: Any = None, parallel: int = 1, n: int = 1024, window_s: float = 0.1,
                         windows: int = 3) -> float:
    """FLOP/s of ``n``×``n`` matmuls on this process's intra-op threads, ``parallel`` at once.

    ``parallel`` Python threads (each with its own intra-op team, as DataParallel's replicas
    run) multiply for the same wall window; the best of ``windows`` windows counts, so a
    moment of interference from other processes lowers the figure less.
    """
    import torch

    dtype = dtype or torch.float32
    operands = [(torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)) for _ in range(parallel)]
    outputs = [torch.empty(n, n, dtype=dtype) for _ in range(parallel)]
    torch.mm(*operands[0], out=outputs[0])  # warm-up: allocator, thread team, kernel choice
    start = time.perf_counter()
    torch.mm(*operands[0], out=outputs[0])
    one = max(time.perf_counter() - start, 1e-6)
    reps = max(1, math.ceil(window_s / one))
    best = 0.0
    for _ in range(windows):
        def work(i: int) -> None:
            for _ in range(reps):
                torch.mm(*operands[i], out=outputs[i])

        threads = [threading.Thread(target=work, args=(i,)) for i in range(parallel)]
        start = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - start
        best = max(best, 2.0 * n**3 * reps * parallel / elapsed)
    return best


def local_bytes(tensors: Any) -> int:
    """Bytes these tensors occupy on this rank; a DTensor counts its local shard, a tensor seen twice once."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for tensor in tensors:
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        nbytes = local.numel() * local.element_size()
        if nbytes == 0:
            continue
        key = (local.data_ptr(), nbytes)
        if key in seen:
            continue
        seen.add(key)
        total += nbytes
    return total


# ---------------------------------------------------------------- peaks (pure)
def table_peak_flops(device_name: str, dtype: str) -> float | None:
    """Dense peak FLOP/s of one GPU named ``device_name`` in ``dtype`` ("fp32", "bf16", "fp16"), if known."""
    lowered = device_name.lower()
    for pattern, peaks in PEAK_TFLOPS:
        if pattern.lower() in lowered:
            value = peaks.get(dtype)
            return None if value is None else value * 1e12
    return None


def env_peak_flops(environ: Mapping[str, str] | None = None) -> float | None:
    """``DPBENCH_PEAK_TFLOPS`` in FLOP/s (per GPU; for the whole CPU on CPU), or None when unset."""
    env = os.environ if environ is None else environ
    raw = env.get(PEAK_ENV)
    if raw is None or not raw.strip():
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{PEAK_ENV} must be a positive number of TFLOP/s per device, got {raw!r}")
    return value * 1e12


def peak_flops(*, device_type: str, device_names: list[str], dtype: str,
               environ: Mapping[str, str] | None = None) -> tuple[float | None, str | None]:
    """Peak FLOP/s of the devices a case uses and where it came from (env, else the GPU table).

    ``device_names``: one entry per GPU used (``torch.cuda.get_device_name``). On CPU the
    measured matmul peak is the caller's (``measured:cpu-matmul``); here only the env applies.
    """
    override = env_peak_flops(environ)
    if override is not None:
        count = len(device_names) if device_type == "cuda" else 1
        return override * max(1, count), f"env:{PEAK_ENV}"
    if device_type != "cuda" or not device_names:
        return None, None
    peaks = [table_peak_flops(name, dtype) for name in device_names]
    if any(p is None for p in peaks):
        return None, None
    return float(sum(peaks)), f"table:{device_names[0]}"


# ---------------------------------------------------------------- derived (pure)
