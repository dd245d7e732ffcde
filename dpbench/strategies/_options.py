"""Options every strategy shares (optimizer, precision) and the ``compile`` option, checked in the parent.

Checked before any process starts, so a bad value is one clear line and a configuration this
machine cannot run is a :class:`StrategyUnavailable` (a skip with its reason in the suites).
"""
from __future__ import annotations

import os
import shutil
from typing import Any

from dpbench.strategies.errors import StrategyUnavailable

__all__ = [
    "OPTIMIZERS",
    "PRECISIONS",
    "COMMON_OPTION_DEFAULTS",
    "check_common_options",
    "check_bool",
    "check_compiler",
]

OPTIMIZERS = ("sgd", "adamw")
PRECISIONS = ("fp32", "bf16", "fp16")
# Merged into every strategy's option_defaults (recorded in results with the rest).
COMMON_OPTION_DEFAULTS: dict[str, Any] = {"optimizer": "sgd", "precision": "fp32"}
# torch.compile's CPU backend (inductor) builds C++ with $CXX or g++; Triton (CUDA) builds its
# launcher with a C compiler.
_C_COMPILERS = ("cc", "gcc", "clang")


def check_bool(strategy: str, options: dict[str, Any], key: str) -> None:
    if not isinstance(options[key], bool):
        raise ValueError(f"{strategy} option {key} must be True or False, got {options[key]!r}")


def check_common_options(strategy: str, options: dict[str, Any], *, device: str) -> None:
    """``optimizer`` and ``precision`` (every strategy) and ``compile`` (where the strategy has it)."""
    optimizer = options["optimizer"]
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"{strategy} option optimizer must be one of {', '.join(OPTIMIZERS)}, got {optimizer!r}")
    precision = options["precision"]
    if precision not in PRECISIONS:
        raise ValueError(f"{strategy} option precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "fp16" and device != "cuda":
        raise StrategyUnavailable(
            f"{strategy} option precision='fp16' needs device='cuda': fp16 training needs loss scaling "
            f"(a GradScaler) and fast fp16 kernels, which dpbench uses on CUDA only; use precision='bf16' on CPU"
        )
    if "compile" in options:
        check_bool(strategy, options, "compile")
        if options["compile"]:
            check_compiler(strategy, device=device)


def check_compiler(strategy: str, *, device: str) -> None:
    """torch.compile builds native code: refuse before any process starts when no compiler is here."""
    c_found = [name for name in _C_COMPILERS if shutil.which(name)]
    cxx = os.environ.get("CXX") or "g++"
    if not c_found:
        raise StrategyUnavailable(
            f"{strategy} option compile=True needs a C compiler (torch.compile builds native code), "
            f"but none of {', '.join(_C_COMPILERS)} is on PATH"
        )
    if device == "cpu" and not shutil.which(cxx):
        raise StrategyUnavailable(
            f"{strategy} option compile=True on CPU needs the C++ compiler torch.compile's inductor calls "
            f"(CXX or g++: {cxx!r}), which is not on PATH"
        )
