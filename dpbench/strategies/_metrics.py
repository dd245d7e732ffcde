"""Model FLOPs, peak FLOP/s, MFU, tokens/s, exposed communication and memory accounting.

Two halves:

* measuring (worker side, needs torch, imported lazily): :func:`count_step_flops` counts one
  forward + backward with ``torch.utils.flop_counter.FlopCounterMode`` (counted, not a formula,
  so it works for any :class:`dpbench.Workload`); :func:`measure_matmul_flops` measures a CPU's
  peak with a large matmul on the calling worker's threads; :func:`local_bytes` sums what
  tensors occupy on this rank (a DTensor counts its local shard only);
* peaks (pure, no torch): :func:`table_peak_flops` / :func:`peak_flops` pick a GPU's dense
  peak from :data:`PEAK_TFLOPS` or ``DPBENCH_PEAK_TFLOPS``, for the math the FLOPs ran in
  (:func:`fp32_math` reads the worker's TF32 settings; convolutions and matmuls are weighted
  by their counted FLOPs, :func:`count_step_flops_by_kind`).

:func:`dpbench.measure.derive.derive` turns these case metrics and a step time into MFU,
tokens/s and exposed communication.
"""

from __future__ import annotations

import math
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "PEAK_TFLOPS",
    "PEAK_ENV",
    "count_step_flops",
    "count_step_flops_by_kind",
    "fp32_math",
    "math_mode",
    "FLOP_KINDS",
    "table_entry",
    "measure_matmul_flops",
    "local_bytes",
    "table_peak_flops",
    "peak_flops",
]

PEAK_ENV = "DPBENCH_PEAK_TFLOPS"

# Dense (no 2:4 sparsity) peak TFLOP/s per GPU: (marketing name, {math: TFLOP/s}). Maths:
# "fp32" plain IEEE FP32 (CUDA cores), "tf32" TF32 tensor cores (what cuDNN runs fp32
# convolutions in by default, and cuBLAS fp32 matmuls with allow_tf32 / "high" precision),
# "bf16" / "fp16" tensor cores with FP32 accumulation (what autocast uses). NVIDIA's data sheets
# quote tensor-core rates with sparsity ("*"): the dense rate is half of it. Sources:
#   H100 SXM / PCIe / NVL, H800: nvidia.com/en-us/data-center/h100/ (H100 data sheet)
#   H200 SXM / H200 NVL: nvidia.com/en-us/data-center/h200/ (H200 data sheet)
#   GH200: nvidia.com/en-us/data-center/grace-hopper-superchip/ (same Hopper GPU as H100 SXM)
#   A100 / A800: nvidia.com/en-us/data-center/a100/ (A100 data sheet)
#   A10: nvidia.com/en-us/data-center/products/a10-gpu/; L4, L40, L40S: their data sheets
#   RTX 4090: NVIDIA Ada GPU architecture whitepaper; RTX 3090: NVIDIA Ampere GA102 whitepaper
#   V100, T4: their data sheets (no TF32 units: cuBLAS/cuDNN run "tf32" as plain FP32)
# Matching (see table_peak_flops) is by whole name tokens, most specific entry first, so
# "H200" never takes "H200 NVL" and "A10" never takes "A10G" or "RTX A1000" (not listed: NVIDIA
# publishes no data sheet for the A10G, so no MFU there unless DPBENCH_PEAK_TFLOPS is set).
PEAK_TFLOPS: tuple[tuple[str, dict[str, float]], ...] = (
    ("H100 PCIe", {"bf16": 756.0, "fp16": 756.0, "tf32": 378.0, "fp32": 51.0}),
    ("H100 NVL", {"bf16": 835.0, "fp16": 835.0, "tf32": 417.5, "fp32": 60.0}),
    ("H100", {"bf16": 989.0, "fp16": 989.0, "tf32": 494.5, "fp32": 67.0}),  # SXM
    ("H800 PCIe", {"bf16": 756.0, "fp16": 756.0, "tf32": 378.0, "fp32": 51.0}),
    ("H800", {"bf16": 989.0, "fp16": 989.0, "tf32": 494.5, "fp32": 67.0}),  # SXM
    ("H200 NVL", {"bf16": 835.0, "fp16": 835.0, "tf32": 417.5, "fp32": 60.0}),
    ("H200", {"bf16": 989.0, "fp16": 989.0, "tf32": 494.5, "fp32": 67.0}),  # SXM
    ("GH200", {"bf16": 989.0, "fp16": 989.0, "tf32": 494.5, "fp32": 67.0}),
    ("A100", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    ("A800", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    ("L40S", {"bf16": 362.0, "fp16": 362.0, "tf32": 183.0, "fp32": 91.6}),
    ("L40", {"bf16": 181.0, "fp16": 181.0, "tf32": 90.5, "fp32": 90.5}),
    ("L4", {"bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3}),
    ("A10", {"bf16": 125.0, "fp16": 125.0, "tf32": 62.5, "fp32": 31.2}),
    ("RTX 4090", {"bf16": 165.2, "fp16": 165.2, "tf32": 82.6, "fp32": 82.6}),
    ("RTX 3090", {"bf16": 71.0, "fp16": 71.0, "tf32": 35.6, "fp32": 35.6}),
    ("V100", {"fp16": 125.0, "tf32": 15.7, "fp32": 15.7}),  # no bf16 tensor cores
    ("T4", {"fp16": 65.0, "tf32": 8.1, "fp32": 8.1}),
)
# Words in device names that say nothing about the chip.
_VENDOR_WORDS = frozenset({"nvidia", "tesla", "geforce"})


# ---------------------------------------------------------------- measuring (worker side)
def count_step_flops(
    model: Any, inputs: Any, target: Any, loss: Callable[[Any, Any], Any], *, autocast: Any = None
) -> int:
    """FLOPs of one forward (incl. the loss) + backward of ``model`` on ``inputs``, as torch counts them."""
    return sum(count_step_flops_by_kind(model, inputs, target, loss, autocast=autocast).values())


# FLOPs of convolutions run on cuDNN, everything else FlopCounterMode counts (mm, addmm, bmm,
# attention) on cuBLAS: the two follow different TF32 switches (see fp32_math).
FLOP_KINDS = ("conv", "matmul")


def count_step_flops_by_kind(
    model: Any, inputs: Any, target: Any, loss: Callable[[Any, Any], Any], *, autocast: Any = None
) -> dict[str, int]:
    """:func:`count_step_flops` split into ``{"conv": …, "matmul": …}`` (they sum to it)."""
    import contextlib

    from torch.utils.flop_counter import FlopCounterMode

    from dpbench.strategies.base import call_model

    with FlopCounterMode(display=False) as counter:
        with autocast if autocast is not None else contextlib.nullcontext():
            value = loss(call_model(model, inputs), target)
        value.backward()
    out = dict.fromkeys(FLOP_KINDS, 0)
    for op, flops in counter.get_flop_counts().get("Global", {}).items():
        out["conv" if "convolution" in str(op) else "matmul"] += int(flops)
    return out


def _precision_setting(chain: list[Any]) -> str | None:
    """The first explicit fp32_precision ("ieee", "tf32", "bf16") along ``chain`` (an op's own
    setting, then its parents'); None when every level says "none" or torch has no such API."""
    for node in chain:
        value = getattr(node, "fp32_precision", None)
        if isinstance(value, str) and value not in ("none", ""):
            return value
    return None


def fp32_math(torch: Any) -> dict[str, str]:
    """How this process runs fp32 matmuls and convolutions on CUDA, as peak-table maths:
    ``{"matmul": "fp32" | "tf32" | "bf16", "conv": "fp32" | "tf32"}``. Read, never set.

    torch 2.13 defaults: cuBLAS matmuls in IEEE FP32 (``torch.backends.cuda.matmul``), cuDNN
    convolutions in TF32 (``torch.backends.cudnn.conv.fp32_precision == "tf32"``, the legacy
    ``cudnn.allow_tf32 = True``). The new per-op setting wins, then its parents', then the
    legacy flags (older torch), then those defaults.
    """
    maths = {"ieee": "fp32", "tf32": "tf32", "bf16": "bf16"}
    backends = torch.backends
    matmul = _precision_setting([getattr(backends.cuda, "matmul", None), backends])
    if matmul is None:
        try:
            matmul = "tf32" if backends.cuda.matmul.allow_tf32 else "ieee"
        except (AttributeError, RuntimeError):
            matmul = "ieee"
    cudnn = backends.cudnn
    conv = _precision_setting([getattr(cudnn, "conv", None), cudnn, backends])
    if conv is None:
        try:
            conv = "tf32" if cudnn.allow_tf32 else "ieee"
        except (AttributeError, RuntimeError):  # mixed legacy/new settings raise in the legacy getter
            conv = "tf32"
    return {"matmul": maths.get(matmul, "fp32"), "conv": maths.get(conv, "fp32")}


def measure_matmul_flops(
    *, dtype: Any = None, parallel: int = 1, n: int = 1024, window_s: float = 0.1, windows: int = 3
) -> float:
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
def _name_tokens(name: str) -> list[str]:
    return [t for t in re.split(r"[\s_-]+", name.lower()) if t and t not in _VENDOR_WORDS]


def table_entry(device_name: str) -> str | None:
    """The :data:`PEAK_TFLOPS` entry naming this GPU, or None.

    An entry matches when its words appear, whole and in order, among the device name's words
    ("NVIDIA A100-SXM4-80GB" → A100; "NVIDIA A10G" is not "A10"); entries are tried most
    specific first. A MIG instance ("… MIG 1g.10gb") has a fraction of the GPU's units: no entry.
    """
    words = _name_tokens(device_name)
    if "mig" in words:
        return None
    for pattern, _peaks in PEAK_TFLOPS:
        want = _name_tokens(pattern)
        if any(words[i : i + len(want)] == want for i in range(len(words) - len(want) + 1)):
            return pattern
    return None


def table_peak_flops(device_name: str, dtype: str) -> float | None:
    """Dense peak FLOP/s of one GPU named ``device_name`` in ``dtype`` ("fp32", "tf32", "bf16", "fp16"), if known."""
    entry = table_entry(device_name)
    if entry is None:
        return None
    value = dict(PEAK_TFLOPS)[entry].get(dtype)
    return None if value is None else value * 1e12


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


def math_mode(dtype: str, fp32: Mapping[str, str] | None) -> dict[str, str]:
    """The maths the FLOPs ran in, per kind: autocast's dtype for both kinds under bf16/fp16;
    for fp32, the TF32 settings the worker read (:func:`fp32_math`; None = plain FP32)."""
    if dtype != "fp32":
        return dict.fromkeys(FLOP_KINDS, dtype)
    fp32 = fp32 or {}
    return {kind: fp32.get(kind, "fp32") for kind in FLOP_KINDS}


def _gpu_peak(name: str, maths: Mapping[str, str], flops_by_kind: Mapping[str, int] | None) -> float | None:
    """One GPU's peak for this step's mix: the step's FLOPs over the time each kind takes at
    its own math's peak (a harmonic mean weighted by FLOPs), so a conv net with TF32 convs and
    an FP32 classifier is judged against what its kernels could do."""
    peaks = {kind: table_peak_flops(name, maths[kind]) for kind in FLOP_KINDS}
    counts = {kind: int((flops_by_kind or {}).get(kind, 0)) for kind in FLOP_KINDS}
    total = sum(counts.values())
    if total <= 0:  # no split known: the matmul setting decides
        return peaks["matmul"]
    if any(counts[kind] and peaks[kind] is None for kind in FLOP_KINDS):
        return None
    return total / sum(counts[kind] / peaks[kind] for kind in FLOP_KINDS if counts[kind])


def peak_flops(
    *,
    device_type: str,
    device_names: list[str],
    dtype: str,
    environ: Mapping[str, str] | None = None,
    maths: Mapping[str, str] | None = None,
    flops_by_kind: Mapping[str, int] | None = None,
) -> tuple[float | None, str | None]:
    """Peak FLOP/s of the devices a case uses and where it came from (env, else the GPU table).

    ``device_names``: one entry per GPU used (``torch.cuda.get_device_name``). ``maths``: the
    math each FLOP kind ran in (:func:`math_mode`; default: ``dtype`` for both). On CPU the
    measured matmul peak is the caller's (``measured:cpu-matmul``); here only the env applies.
    """
    override = env_peak_flops(environ)
    if override is not None:
        count = len(device_names) if device_type == "cuda" else 1
        return override * max(1, count), f"env:{PEAK_ENV}"
    if device_type != "cuda" or not device_names:
        return None, None
    maths = dict(maths) if maths else math_mode(dtype, None)
    peaks = [_gpu_peak(name, maths, flops_by_kind) for name in device_names]
    if any(p is None for p in peaks):
        return None, None
    return float(sum(peaks)), f"table:{device_names[0]}"


# ---------------------------------------------------------------- derived (pure)
