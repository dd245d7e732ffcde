"""Will it fit? Checked in the parent before any worker starts (:func:`check_fits`).

The case's estimate (:class:`dpbench.strategies.estimate.Estimator`) is compared with the memory
free where its workers would run: each GPU's free memory read through NVML (never through
``torch.cuda``, which would initialise CUDA in the parent) against the sum of the workers placed
on it; on a CPU the host's available RAM (psutil) against the sum of every worker, since the
ranks of one host share it. A case that does not fit raises :class:`DoesNotFit` (a
``StrategyUnavailable``: the suites skip it with the reason) instead of crashing out of memory.

Environment (the pytest plugin's ``--dpbench-device-memory`` and
``--dpbench-ignore-memory-estimate`` set the first two):

* ``DPBENCH_DEVICE_MEMORY=SIZE`` — the memory of each device (each GPU; the host's RAM on CPU)
  instead of what is free now ("80GB", "80 GiB", "8e10");
* ``DPBENCH_IGNORE_MEMORY_ESTIMATE=1`` — launch whatever the estimate says;
* ``DPBENCH_MEMORY_ESTIMATE=state|peak`` — compare what the workers hold between steps (the
  default for ``dpbench.launch``: exact and instant) or the estimated peak with the forward +
  backward's activations (the suites' default: it builds the model under ``FakeTensorMode``
  once per workload, seconds the first time).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from dpbench.strategies import CommonOptions
from dpbench.strategies.errors import StrategyUnavailable

__all__ = ["DoesNotFit", "check_fits", "free_memory", "ENV_DEVICE_MEMORY", "ENV_IGNORE", "ENV_MODE"]

ENV_DEVICE_MEMORY = "DPBENCH_DEVICE_MEMORY"
ENV_IGNORE = "DPBENCH_IGNORE_MEMORY_ESTIMATE"
ENV_MODE = "DPBENCH_MEMORY_ESTIMATE"
MODES = ("state", "peak")
_ESTIMATORS: dict[tuple[str, int, bool], Any] = {}
_CACHED = 16


class DoesNotFit(StrategyUnavailable):
    """The case's estimated memory exceeds what its devices have free (the message says by how much)."""


def _estimator(workload: Any, activations: bool) -> Any:
    from dpbench.strategies.estimate import Estimator

    # One estimator per workload (its name and model factory: two workloads may share a name), so
    # the trials of a case build its meta and fake models once; the estimator keeps the workload
    # alive, so the factory's id is not reused while the entry lives. The oldest entries go first.
    key = (str(workload.params.get("spec", workload.name)), id(workload.model), activations)
    if key not in _ESTIMATORS:
        while len(_ESTIMATORS) >= _CACHED:
            _ESTIMATORS.pop(next(iter(_ESTIMATORS)))
        _ESTIMATORS[key] = Estimator(workload, activations=activations)
    return _ESTIMATORS[key]


def free_memory(device: str, devices: tuple[str, ...], environ: Mapping[str, str]) -> dict[str, tuple[int, str]]:
    """``{device: (bytes, where)}`` for each distinct device; empty when it cannot be read."""
    from dpbench.strategies.memory import parse_bytes

    given = environ.get(ENV_DEVICE_MEMORY)
    if given:
        limit = parse_bytes(given, argument=ENV_DEVICE_MEMORY)
        return {d: (limit, f"{ENV_DEVICE_MEMORY}={given}") for d in dict.fromkeys(devices)}
    if device == "cpu":
        import psutil

        return {"cpu": (int(psutil.virtual_memory().available), "available RAM")}
    return _gpu_free(devices, environ)


def _gpu_free(devices: tuple[str, ...], environ: Mapping[str, str]) -> dict[str, tuple[int, str]]:
    from dpbench.sampler.gpus import load_nvml, probe_gpus

    try:
        nvml = load_nvml()
        visible = probe_gpus(nvml, environ)  # CUDA's order under CUDA_VISIBLE_DEVICES, read through NVML
        out = {}
        for d in dict.fromkeys(devices):
            info = visible[int(d.split(":")[1])]
            if info.parent_uuid is not None:
                continue  # a MIG instance: NVML reports the parent's memory, not the slice's
            handle = nvml.nvmlDeviceGetHandleByUUID(info.uuid)
            out[d] = (int(nvml.nvmlDeviceGetMemoryInfo(handle).free), "free (NVML)")
        return out
    except Exception:  # no NVML, no GPU, an index NVML does not see: nothing to compare with
        return {}


def check_fits(
    strategy_cls: Any,
    workload: Any,
    *,
    world_size: int,
    global_batch: int,
    device: str,
    devices: tuple[str, ...],
    processes: int,
    options: CommonOptions,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any] | None:
    """Raise :class:`DoesNotFit` when the case's estimate exceeds the free memory; return the
    estimate (``CaseEstimate.to_dict()``) otherwise, None when it was not made."""
    environ = os.environ if environ is None else environ
    if environ.get(ENV_IGNORE, "").strip().lower() in ("1", "true", "yes", "on"):
        return None
    mode = environ.get(ENV_MODE, "state").strip() or "state"
    if mode not in MODES:
        raise ValueError(f"{ENV_MODE}: expected one of {', '.join(MODES)}, found {mode!r}")
    case = None
    for activations in dict.fromkeys((mode == "peak", False)):
        try:
            case = _estimator(workload, activations).case(
                strategy_cls.name, world_size=world_size, global_batch=global_batch, options=options
            )
            break
        except Exception:  # noqa: BLE001 - an estimate that fails never blocks a run: the run says what is wrong
            continue
    if case is None:
        return None
    free = free_memory(device, devices, environ)
    ranks = case.ranks
    # Worker r runs on devices[r] (an in-process strategy: one worker, on its first device).
    placed = devices[: len(ranks)] if len(devices) >= len(ranks) else (devices[0],) * len(ranks)
    for target, (limit, where) in free.items():
        on_it = [r for r, d in zip(ranks, placed) if d == target]
        need = sum(_need(r) for r in on_it)
        if on_it and need > limit:
            raise DoesNotFit(_reason(case, on_it, need, limit, where, target, processes))
    return case.to_dict()


def _need(rank: Any) -> int:
    held = rank.params_bytes + rank.grads_bytes + rank.optimizer_state_bytes + rank.comm_buffer_bytes
    return rank.peak_bytes if rank.peak_bytes is not None else held


def _gib(n: int) -> str:
    return f"{n / 2**30:.3g}"


def _reason(case: Any, ranks: list[Any], need: int, limit: int, where: str, target: str, processes: int) -> str:
    worst = max(ranks, key=_need)
    parts = [
        f"params {_gib(worst.params_bytes)}",
        f"grads {_gib(worst.grads_bytes)}",
        f"{case.optimizer} {_gib(worst.optimizer_state_bytes)}",
    ]
    if worst.comm_buffer_bytes:
        parts.append(f"buffers {_gib(worst.comm_buffer_bytes)}")
    if worst.activation_bytes is not None:
        parts.append(f"activations {_gib(worst.activation_bytes)}")
    sharing = f" × {len(ranks)} workers sharing {target}" if len(ranks) > 1 else ""
    return (
        f"{case.strategy} w{case.world_size} needs ~{_gib(_need(worst))} GiB per rank ({', '.join(parts)} GiB)"
        f"{sharing}: ~{_gib(need)} GiB, the device has {_gib(limit)} GiB ({where}); "
        f"set {ENV_IGNORE}=1 (--dpbench-ignore-memory-estimate) to run it anyway"
    )
