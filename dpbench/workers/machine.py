"""Environment facts for saved runs: GPUs, driver, CUDA/NCCL/torch versions, lock-file hash.

Gathered in one place (the suites' machine_info hook and the report both use it) and
without creating a CUDA context: GPU facts come from NVML, versions from the torch build.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
from pathlib import Path
from typing import Any

__all__ = ["gpu_inventory", "installed_packages", "lock_file_hash", "machine_facts", "software_facts", "LOCK_FILE"]

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


def installed_packages() -> dict[str, str]:
    """Every distribution this interpreter can import, normalised name (PEP 503) → version; where
    one name is installed twice, the one found first on ``sys.path`` (the one an import gets)."""
    from importlib import metadata

    found: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"] if dist.metadata else None
        if name:
            found.setdefault(re.sub(r"[-_.]+", "-", name).lower(), str(dist.version))
    return dict(sorted(found.items()))


def _nccl(torch: Any) -> str | None:
    if not torch.version.cuda:
        return None
    try:
        # Reads the linked NCCL's version; does not initialise CUDA.
        version = torch.cuda.nccl.version()
        return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
    except Exception as exc:  # a CUDA build without NCCL raises from the C extension
        return f"unavailable ({type(exc).__name__})"


def _cudnn(torch: Any) -> str | None:
    if not (torch.version.cuda or getattr(torch.version, "hip", None)):
        return None
    try:
        # Loads the library to read its version; creates no CUDA context.
        version = torch.backends.cudnn.version()
    except Exception as exc:  # a build whose cuDNN cannot be loaded here
        return f"unavailable ({type(exc).__name__})"
    return None if version is None else str(version)


def _build(torch: Any) -> str:
    if getattr(torch.version, "hip", None):
        return f"ROCm {torch.version.hip}"
    return f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU"


def software_facts() -> dict[str, Any]:
    """The interpreter and torch build this process runs: versions an upgrade changes.

    Imports only the standard library and torch, so ``dpbench ab`` can load this file by path in
    another environment's interpreter (whatever dpbench that environment holds)."""
    import torch

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_git": getattr(torch.version, "git_version", None),
        "torch_build": _build(torch),
        "cuda": torch.version.cuda,
        "cudnn": _cudnn(torch),
        "nccl": _nccl(torch),
        "packages": installed_packages(),
    }


def machine_facts() -> dict[str, Any]:
    """Everything pytest-benchmark's machine_info leaves out that a dpbench number depends on."""
    from dpbench.schema import __version__

    software = software_facts()
    facts = {
        **{k: software[k] for k in ("torch", "cuda", "nccl", "torch_git", "torch_build", "cudnn", "packages")},
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
