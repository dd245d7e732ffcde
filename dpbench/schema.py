"""Saved-result identifiers shared by the suites (writers) and the report (reader).

Torch-free on purpose: the report imports this without pulling in torch.
Bump ``SCHEMA_VERSION`` whenever a field below changes meaning; the report refuses
versions it does not know with a clear message.
"""

from __future__ import annotations

from enum import Enum

__all__ = [
    "__version__",
    "SCHEMA_VERSION",
    "READABLE_SCHEMAS",
    "Kind",
    "StrategyName",
    "BASELINE_STRATEGY",
    "Phase",
    "EXTRA_INFO_FIELDS",
    "Profile",
    "EnergyGap",
    "OPTIMIZERS",
    "PRECISIONS",
    "DEFAULT_OPTIMIZER",
    "DEFAULT_PRECISION",
    "PRECISIONS_FINEST_FIRST",
    "coarsest_precision",
]

# dpbench's own version, recorded in every run's machine_info (here, below everything that records it).
__version__ = "0.1.0"

SCHEMA_VERSION = 2
# The versions the report and the gate read: schema 1 (one trial per case, rounds timed in the
# calling process) still loads so old baselines stay comparable.
READABLE_SCHEMAS = (1, 2)


class Kind(str, Enum):
    """``extra_info["kind"]``: what a benchmark's per-step time means."""

    TRAINING = "training"  # seconds per training step
    COLLECTIVE = "collective"  # seconds per collective call


class StrategyName(str, Enum):
    SINGLE = "single"
    DP = "dp"
    TORCH_DP = "torch-dp"
    DDP = "ddp"
    MANUAL = "manual"
    ALLREDUCE = "allreduce"
    FSDP = "fsdp"  # FSDP2 fully_shard
    ZERO = "zero"  # DDP + ZeroRedundancyOptimizer (ZeRO-1)


BASELINE_STRATEGY = StrategyName.SINGLE.value
"""The strategy every other is compared with ("× single"): one replica on one device, so it runs at
world size 1 only. A role, named once here, that results, decisions and recipes refer to."""


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


class EnergyGap(str, Enum):
    """Why a window has no energy reading (``energy.absent`` in a trial's record, ``energy_absent`` in a
    sampler summary): an energy that cannot be read is absent with one of these, never 0 J."""

    NO_COUNTER = "no_counter"  # no readable counter: the CPU backend, or NVML says the GPU has none
    SHORT_WINDOW = "short_window"  # the window is shorter than the counter needs (dpbench.sampler.energy)
    STALLED = "stalled"  # the counter held one value longer than a working GPU's counter ever does
    RESET = "reset"  # the counter went back, or jumped further than any board draws: not a wrap
    OTHER_NODES = "other_nodes"  # ranks ran on other nodes, whose GPUs this host's sampler cannot read


# The optimizers and precisions every strategy trains with (options.optimizer, options.precision),
# in the order errors and help list them, and what a case that names none trains with: the
# strategies' options default to these, and a question (dpbench.decision) fills them in the same way.
OPTIMIZERS = ("sgd", "adamw")
PRECISIONS = ("fp32", "bf16", "fp16")
DEFAULT_OPTIMIZER = "sgd"
DEFAULT_PRECISION = "fp32"

# The precisions a step computes in (options.precision, fingerprint.precision), finest first:
# fp32 keeps 24 significant bits, fp16 11, bf16 8.
PRECISIONS_FINEST_FIRST = ("fp32", "fp16", "bf16")


def coarsest_precision(*names: str) -> str:
    """The coarsest of ``names``; a name outside :data:`PRECISIONS_FINEST_FIRST` counts as fp32."""
    order = PRECISIONS_FINEST_FIRST
    return max(names, key=lambda name: order.index(name) if name in order else 0)


# Keys every dpbench training benchmark writes into pytest-benchmark's ``extra_info`` (schema 2).
EXTRA_INFO_FIELDS = (
    "schema",
    "case_key",
    # count, rounds_per_trial, order, started_at, step_time_s, round_times_s, control_s, cv, sampler,
    # timelines, minor_faults_per_step, disturbed (per trial: null or why, replaced, left_out, measured)
    "trials",
    "step_time_s",  # the headline: median over the trials kept (disturbed ones left out) of each trial's median
    "step_time_ci95",
    "kind",  # "training" or "collective"
    "strategy",
    "options",
    "workload",
    "workload_spec",  # the spec the workload was named by (a registered name, module:attr, hf:…, overrides)
    "parameter_count",  # the model's parameters, counted on the meta device (None where it cannot be built there)
    "buffer_bytes",  # bytes of the model's buffers (BatchNorm statistics; 0: none), as DDP broadcasts them
    "world_size",
    "device_type",
    "backend",
    "global_batch",
    "per_replica_batch",
    "steps_per_round",
    "samples_per_s",
    "step_time_p95",
    "phases",
    "peak_memory_bytes",
    "minor_faults_per_step",  # median over trials of minor page faults per step (the allocator's share)
    "sampler",
    "threads_per_worker",
    "harness_settings",  # what dpbench set for the workers (threads, pinning; no runtime variables)
    "seed",
    "profile",
    # the model the case trained, the same way under every strategy (first losses, parameter sums)
    "fingerprint",
    # GPU energy over each trial's timed rounds: J/sample and W with their spread, the idle draw, or why
    # absent (EnergyGap); null for convergence cases
    "energy",
    # per trial: how long its GPUs were sampled, and whether NVML's readings needed longer; null on CPU
    "sampled_window",
)
