"""Environment facts for saved runs: GPUs, driver, CUDA/NCCL/torch versions, lock-file hash.

Gathered in one place (the suites' machine_info hook and the report both use it) and
without creating a CUDA context: GPU facts come from NVML, versions from the torch build.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

__all__ = ["gpu_inventory", "lock_file_hash", "machine_facts", "LOCK_FILE"]

LOCK_FILE = Path(__file__).resolve().parents[2] / "constraints.txt"


def lock_file_hash(path: Path = LOCK_FILE) -> str | None:
    """sha256 of the constraints file the environment was installed from (None if absent)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def lock_drift(path: Path = LOCK_FILE) -> dict[str, str]:
    """Each package pinned in the lock that is installed at another version: name → the version found
    (a local build tag such as ``+cpu`` or ``+cu128`` is not a difference). Empty: the lock holds."""
    from importlib import metadata

    drift = {}
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return drift
    for line in lines:
        name, sep, pinned = line.split("#", 1)[0].strip().partition("==")
        if not sep:
            continue
        try:
            found = metadata.version(name.strip())
        except metadata.PackageNotFoundError:
            continue  # not installed: it measures nothing here
        if found.split("+", 1)[0] != pinned.strip().split("+", 1)[0]:
            drift[name.strip()] = found
    return drift


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def gpu_inventory() -> dict[str, Any]:
    """GPU names, UUIDs and memory plus the driver version from NVML; empty without NVML."""
    try:
        import pynvml
    except ImportError:
        return {"gpus": [], "gpu_count": 0, "driver": None, "nvml_error": "nvidia-ml-py not installed"}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return {"gpus": [], "gpu_count": 0, "driver": None, "nvml_error": _text(exc)}
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            gpus.append(
                {
                    "name": _text(pynvml.nvmlDeviceGetName(handle)),
                    "uuid": _text(pynvml.nvmlDeviceGetUUID(handle)),
                    "memory_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
                }
            )
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        return {
            "gpus": gpus,
            "gpu_count": len(gpus),
            "driver": driver,
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        }
    finally:
        pynvml.nvmlShutdown()


def machine_facts() -> dict[str, Any]:
    """Everything pytest-benchmark's machine_info leaves out that a dpbench number depends on."""
    import torch

    from dpbench.schema import __version__

    nccl = None
    if torch.version.cuda:
        try:
            # Reads the linked NCCL's version; does not initialise CUDA.
            version = torch.cuda.nccl.version()
            nccl = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
        except Exception as exc:  # a CUDA build without NCCL raises from the C extension
            nccl = f"unavailable ({type(exc).__name__})"
    facts = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": nccl,
        "cpu_count": os.cpu_count(),
        "dpbench": _provenance(__version__),
    }
    facts.update(gpu_inventory())
    return facts


def _provenance(version: str) -> dict[str, Any]:
    """The lock's hash only where the installed versions are the lock's: an image's own torch or an
    unpinned pandas is recorded as the versions found (``lock_drift``), never as the lock."""
    drift = lock_drift()
    if drift:
        return {"version": version, "lock_hash": None, "lock_drift": drift}
    return {"version": version, "lock_hash": lock_file_hash()}
