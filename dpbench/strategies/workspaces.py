"""What CUDA's math libraries keep allocated on a device beside the tensors, estimated in the parent.

torch gives every cuBLAS handle a workspace per stream, allocated through its caching allocator,
so ``torch.cuda.max_memory_allocated`` counts it (``aten/src/ATen/cuda/CublasHandlePool.cpp``):

* cuBLAS: ``CUBLAS_WORKSPACE_CONFIG`` (``:SIZE_KIB:COUNT`` pairs, summed) or torch's default —
  32 MiB on compute capability 9.0 (H100, H200), ``:4096:2:16:8`` (8.125 MiB) elsewhere;
* cuBLASLt (``addmm`` with a bias, the fused matmuls): ``CUBLASLT_WORKSPACE_SIZE`` KiB (default
  1024), never more than the cuBLAS workspace, none of its own when
  ``TORCH_CUBLASLT_UNIFIED_WORKSPACE=1`` makes it share cuBLAS's.

torch keeps one handle per thread and device, and a training step calls cuBLAS from two threads
on each device: the one that runs the forward and autograd's device thread, which runs the
backward — so two workspaces of each kind per device. cuDNN's workspaces are allocated per
convolution for the algorithm it picks, and freed after it: their size is not known before the
run; the fit check's fragmentation margin covers them (``dpbench.launcher.fit``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["CudaWorkspaces", "cuda_workspaces", "HANDLES_PER_DEVICE"]

# The forward's thread and autograd's device thread: each has its own cuBLAS handle on the device.
HANDLES_PER_DEVICE = 2
# torch's defaults (CublasHandlePool.cpp): 32 MiB on sm90, ":4096:2:16:8" elsewhere; cuBLASLt 1024 KiB.
_CUBLAS_SM90 = 4096 * 8 * 1024
_CUBLAS_DEFAULT = 4096 * 1024 * 2 + 16 * 1024 * 8
_CUBLASLT_DEFAULT_KIB = 1024


@dataclass(kw_only=True, frozen=True)
class CudaWorkspaces:
    """The workspaces one worker keeps on each CUDA device it computes on."""

    capability: tuple[int, int] | None
    """The device's compute capability (None: not known; sm90's sizes, the largest default, are counted)."""

    cublas_bytes: int
    """cuBLAS workspace of one handle."""

    cublaslt_bytes: int
    """cuBLASLt workspace of one handle (0 when it shares cuBLAS's)."""

    handles: int = HANDLES_PER_DEVICE
    """cuBLAS handles on the device: the forward's thread and autograd's device thread."""

    def per_device(self) -> int:
        """Bytes on one device."""
        return self.handles * (self.cublas_bytes + self.cublaslt_bytes)

    def describe(self) -> str:
        """``2 handles x (cuBLAS 32 MiB + cuBLASLt 1 MiB) on sm90``: what is counted, in one phrase."""
        where = "capability unknown, sm90's sizes" if self.capability is None else "sm{}{}".format(*self.capability)
        return (
            f"{self.handles} handles x (cuBLAS {_mib(self.cublas_bytes)} + cuBLASLt {_mib(self.cublaslt_bytes)}) "
            f"on {where}"
        )

    def to_dict(self) -> dict:
        return {
            "capability": None if self.capability is None else list(self.capability),
            "cublas_bytes": self.cublas_bytes,
            "cublaslt_bytes": self.cublaslt_bytes,
            "handles": self.handles,
            "per_device_bytes": self.per_device(),
        }


def _mib(n: int) -> str:
    return f"{n / 2**20:g} MiB"


def _cublas_bytes(capability: tuple[int, int] | None, environ: Mapping[str, str]) -> int:
    default = _CUBLAS_SM90 if capability is None or tuple(capability) == (9, 0) else _CUBLAS_DEFAULT
    config = environ.get("CUBLAS_WORKSPACE_CONFIG")
    if not config:
        return default
    pairs = re.findall(r":([0-9]+):([0-9]+)", config)
    # torch warns and keeps its default when nothing parses
    return sum(int(size) * 1024 * int(count) for size, count in pairs) if pairs else default


def _cublaslt_bytes(cublas: int, environ: Mapping[str, str]) -> int:
    # torch reads this flag as "1" (on), "0" (off) or unset; anything else counts as unset
    unified = environ.get("TORCH_CUBLASLT_UNIFIED_WORKSPACE")
    if unified == "1":
        return 0
    raw = environ.get("CUBLASLT_WORKSPACE_SIZE", "").strip()
    kib = int(raw) if raw.isdigit() else _CUBLASLT_DEFAULT_KIB
    # capped at the cuBLAS workspace unless the unified workspace is turned off outright
    return kib * 1024 if unified == "0" else min(kib * 1024, cublas)


def cuda_workspaces(capability: tuple[int, int] | None, environ: Mapping[str, str]) -> CudaWorkspaces:
    """The workspaces a worker launched with ``environ`` keeps on a device of ``capability``."""
    cublas = _cublas_bytes(capability, environ)
    return CudaWorkspaces(
        capability=None if capability is None else (int(capability[0]), int(capability[1])),
        cublas_bytes=cublas,
        cublaslt_bytes=_cublaslt_bytes(cublas, environ),
    )
