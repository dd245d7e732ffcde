"""Saved-result identifiers shared by the suites (writers) and the report (reader).

Torch-free on purpose: the report imports this without pulling in torch.
Bump ``SCHEMA_VERSION`` whenever a field below changes meaning; the report refuses
versions it does not know with a clear message.
"""
from __future__ import annotations

from enum import Enum

__all__ = ["SCHEMA_VERSION", "StrategyName", "Phase", "EXTRA_INFO_FIELDS", "Profile"]

SCHEMA_VERSION = 1


class StrategyName(str, Enum):
    SINGLE = "single"
    DP = "dp"
    TORCH_DP = "torch-dp"
    DDP = "ddp"
    MANUAL = "manual"
    ALLREDUCE = "allreduce"


class Phase(str, Enum):
    """Phase names used in ``extra_info["phases"]`` (seconds per step)."""

    SCATTER = "scatter"
    REPLICATE = "replicate"
    APPLY = "apply"  # forward on every replica (dp)
    GATHER = "gather"
    FORWARD = "forward"
    BACKWARD = "backward"
    COMPUTE = "compute"  # forward + backward (allreduce, manual)
    COMMUNICATION = "communication"  # gradient synchronisation not hidden behind compute
    OPTIMIZER = "optimizer"


class Profile(str, Enum):
    QUICK = "quick"
    FULL = "full"


# Keys every dpbench benchmark writes into pytest-benchmark's ``extra_info``.
EXTRA_INFO_FIELDS = (
    "schema",
    "kind",  # "training" or "collective"
    "strategy",
    "options",
    "workload",
    "world_size",
    "device_type",
    "backend",
    "global_batch",
    "per_replica_batch",
    "steps_per_round",
    "samples_per_s",
    "step_time_p50",
    "step_time_p95",
    "phases",
    "peak_memory_bytes",
    "sampler",
    "threads_per_worker",
    "seed",
    "profile",
)
