#!/usr/bin/env python
"""Print the GPU inventory (the interpreter and whether it runs the lock; driver, CUDA, NCCL,
cuDNN; each GPU's name, memory, persistence and compute mode) and, with --require-cuda, fail when
torch cannot use CUDA.

    python -m tools.gpu_inventory [--require-cuda]

The facts come from :func:`dpbench.workers.machine.machine_facts` (the same ones saved runs
carry): NVML for the GPUs and the driver, the torch build for CUDA/NCCL. No CUDA context is
created: ``torch.cuda.is_available()`` asks the driver only. Exit codes: 0 fine, 1 CUDA
required but unavailable (the reason is printed on one line), so a GPU job fails at its start
instead of benchmarking the CPU.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["inventory_lines", "cuda_problem", "gpu_modes", "mode_lines", "provenance_line", "missing_line", "main"]

# What gpu-check's steps import, and which steps go without each: the image's own Python may lack some.
NEEDED = {
    "pytest": "every test and suite step",
    "pytest_benchmark": "every pytest step (pyproject's addopts name its options)",
    "psutil": "the workers",
    "pynvml": "GPU facts and sampling (nvidia-ml-py)",
    "sklearn": "the convergence step (scikit-learn's digits)",
    "pandas": "the report and compare",
    "seaborn": "the report",
    "jinja2": "the report",
    "scipy": "compare",
}

# NVML's compute modes (nvmlComputeMode_t): anything but DEFAULT limits how many processes may
# hold a context, and two ranks sharing the GPU need two.
COMPUTE_MODES = {0: "DEFAULT", 1: "EXCLUSIVE_THREAD", 2: "PROHIBITED", 3: "EXCLUSIVE_PROCESS"}


def inventory_lines(facts: dict[str, Any], *, cuda_available: bool, cuda_devices: int, cudnn: Any) -> list[str]:
    """The inventory as ``key: value`` lines, GPUs one per line."""
    lines = [
        f"driver: {facts.get('driver') or 'none (' + str(facts.get('nvml_error')) + ')'}",
        f"torch: {facts.get('torch')}  cuda (build): {facts.get('cuda')}  nccl: {facts.get('nccl')}  cudnn: {cudnn}",
        f"cuda available: {cuda_available}  cuda devices: {cuda_devices}  "
        f"CUDA_VISIBLE_DEVICES: {facts.get('cuda_visible_devices')}",
        f"nvml gpus: {facts.get('gpu_count', 0)}",
    ]
    lines += [
        f"  gpu {i}: {g['name']}  {g['uuid']}  {g['memory_bytes'] / 2**30:.0f} GiB"
        for i, g in enumerate(facts.get("gpus") or [])
    ]
    return lines


def gpu_modes(nvml: Any) -> list[dict[str, Any]]:
    """Each GPU's persistence mode (on/off) and compute mode, read through an initialised NVML."""
    out = []
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        modes: dict[str, Any] = {"index": index}
        for key, read in (
            ("persistence", nvml.nvmlDeviceGetPersistenceMode),
            ("compute", nvml.nvmlDeviceGetComputeMode),
        ):
            try:
                modes[key] = read(handle)
            except Exception as exc:  # NVMLError: not supported on this GPU or driver
                modes[key] = f"unknown ({exc})"
        out.append(modes)
    return out


def mode_lines(modes: list[dict[str, Any]]) -> list[str]:
    """One line per GPU; a compute mode other than DEFAULT is flagged (ranks sharing a GPU need it)."""
    lines = []
    for m in modes:
        persistence = {1: "on", 0: "off (dpbench holds NVML open during a session)"}.get(
            m["persistence"], m["persistence"]
        )
        compute = COMPUTE_MODES.get(m["compute"], m["compute"])
        warn = "" if compute == "DEFAULT" else "  WARNING: two ranks on this GPU need compute mode DEFAULT"
        lines.append(f"  gpu {m['index']}: persistence mode {persistence}  compute mode {compute}{warn}")
    return lines


def provenance_line(executable: str, dpbench_facts: dict[str, Any]) -> str:
    """Which Python runs, and whether its packages are the lock's (constraints.txt) or the image's own."""
    drift = dpbench_facts.get("lock_drift")
    if not drift:
        lock = str(dpbench_facts.get("lock_hash"))[:12]
        return f"python: {executable}  packages: the lock (constraints.txt, hash {lock})"
    found = ", ".join(f"{name} {version}" for name, version in sorted(drift.items()))
    return f"python: {executable}  packages: NOT the lock; saved runs record the versions found: {found}"


def missing_line(find_spec: Any = None) -> str:
    """Which of the modules gpu-check needs this Python lacks, and what goes without each."""
    import importlib.util

    find = find_spec or importlib.util.find_spec
    missing = [f"{name} ({what})" for name, what in NEEDED.items() if find(name) is None]
    return "missing for gpu-check: " + ("; ".join(missing) if missing else "nothing")


def _modes_here() -> list[str]:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:  # no nvidia-ml-py or no driver: the facts above already say so
        return [f"  persistence/compute mode: unknown ({type(exc).__name__})"]
    try:
        return mode_lines(gpu_modes(pynvml))
    finally:
        pynvml.nvmlShutdown()


def cuda_problem(facts: dict[str, Any], *, cuda_available: bool) -> str | None:
    """Why CUDA cannot be used here (one line), or None when it can."""
    if cuda_available:
        return None
    if not facts.get("cuda"):
        return f"torch {facts.get('torch')} is a CPU-only build (torch.version.cuda is None)"
    if not facts.get("gpu_count"):
        return f"NVML sees no GPU ({facts.get('nvml_error') or 'no device'}); is the driver loaded?"
    return (
        f"torch built for CUDA {facts.get('cuda')} cannot use the {facts.get('gpu_count')} GPU(s) NVML "
        f"sees with driver {facts.get('driver')} (driver too old for this wheel, or "
        f"CUDA_VISIBLE_DEVICES={facts.get('cuda_visible_devices')!r} hides them)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--require-cuda", action="store_true", help="exit 1 when torch cannot use CUDA")
    args = parser.parse_args(argv)
    import torch

    from dpbench.workers.machine import machine_facts

    facts = machine_facts()
    available = torch.cuda.is_available()
    count = torch.cuda.device_count() if available else 0
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    print(provenance_line(sys.executable, facts.get("dpbench") or {}))
    print(missing_line())
    for line in inventory_lines(facts, cuda_available=available, cuda_devices=count, cudnn=cudnn):
        print(line)
    if facts.get("gpu_count"):
        for line in _modes_here():
            print(line)
    problem = cuda_problem(facts, cuda_available=available)
    if args.require_cuda and problem is not None:
        print(f"gpu-inventory: CUDA required but unavailable: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
