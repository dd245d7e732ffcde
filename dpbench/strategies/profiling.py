"""Case metrics: the untimed measurements ``Run.case_metrics()`` takes once per case.

Worker side (:func:`rank_metrics`, run on every rank at once after the timed steps):

* memory: bytes of the parameters, gradients and optimizer state this rank holds (a DTensor
  counts its local shard) and the peak seen by the timed steps;
* model FLOPs (rank 0): one forward + backward of the *global* batch on a fresh copy of the
  model, counted by ``FlopCounterMode`` (:func:`dpbench.strategies._metrics.count_step_flops`);
* compute-only step time (ddp, zero, fsdp): the rank's own compute with gradient sync off —
  an unwrapped *twin* of the model (same device, threads, precision and ``compile``) runs
  forward + backward on the rank's slice and the rank's optimizer share is stepped, every rank
  at the same time so they compete for cores as in a real step, and no collective is issued.
  The trained model is never touched, so the run continues exactly as before;
* total collective time: the collectives one step issues (the strategy's
  :meth:`~dpbench.strategies.base.Strategy.collective_plan`) replayed back to back with
  compute idle;
* CPU peak FLOP/s: a large matmul on this worker's threads (:func:`dpbench.strategies._metrics.measure_matmul_flops`),
  once per process for each way a case shares the cores (``known_peaks``: later cases reuse it).

Parent side: :func:`combine` reduces the per-rank answers to the JSON-safe dict.
"""

from __future__ import annotations

import resource
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dpbench.strategies._options import CommonOptions

__all__ = [
    "Collective",
    "replay_seconds",
    "twin_step_times",
    "memory_report",
    "gpu_keys",
    "rank_metrics",
    "combine",
]


@dataclass(kw_only=True, frozen=True)
class Collective:
    """One collective of a step: ``numel`` elements of the full tensor (all-gather output,
    reduce-scatter input), in ``dtype`` (a torch dtype name); ``src`` for broadcasts."""

    op: str  # "all_reduce", "broadcast", "all_gather", "reduce_scatter"
    numel: int
    dtype: str
    src: int = 0
    group: str = "world"  # or a named subgroup of the strategy's (HSDP: "shard", "replicate")


def _sync(devices: list[str]) -> None:
    import torch

    for device in devices:
        torch.cuda.synchronize(device)


def replay_seconds(
    plan: list[Collective],
    *,
    device: Any,
    group: Any,
    world_size: int,
    cuda_devices: list[str],
    reps: int = 5,
    groups: dict[str, tuple[Any, int]] | None = None,
) -> float:
    """Median seconds, on this rank, of the whole plan issued back to back (every rank must call);
    ``groups``: the named subgroups a collective may name, each (process group, its size)."""
    named = {"world": (group, world_size), **(groups or {})}
    import torch
    import torch.distributed as dist

    # The *_single names replace the *_tensor ones in recent torch (same collectives).
    all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    sizes: dict[tuple[str, str], int] = {}
    for c in plan:
        sizes[(c.op, c.dtype)] = max(c.numel, sizes.get((c.op, c.dtype), 0))
    buffers = {key: torch.zeros(n, dtype=getattr(torch, key[1]), device=device) for key, n in sizes.items()}
    smallest = min(size for _, size in named.values())
    shards = {
        key: torch.zeros(-(-n // smallest), dtype=getattr(torch, key[1]), device=device) for key, n in sizes.items()
    }

    def issue(c: Collective) -> None:
        full = buffers[(c.op, c.dtype)].narrow(0, 0, c.numel)
        on, size = named[c.group]
        if c.op == "all_reduce":
            dist.all_reduce(full, group=on)
        elif c.op == "broadcast":
            dist.broadcast(full, src=c.src, group=on)
        elif c.op == "all_gather":
            all_gather(full, shards[(c.op, c.dtype)].narrow(0, 0, c.numel // size), group=on)
        elif c.op == "reduce_scatter":
            reduce_scatter(shards[(c.op, c.dtype)].narrow(0, 0, c.numel // size), full, group=on)
        else:
            raise ValueError(f"unknown collective {c.op!r}")

    for c in plan:  # warm-up: connections, algorithm choice
        issue(c)
    times = []
    for _ in range(reps):
        _sync(cuda_devices)
        dist.barrier(group=group)  # every rank starts together, as inside a step
        start = time.perf_counter()
        for c in plan:
            issue(c)
        _sync(cuda_devices)  # NCCL collectives are asynchronous: wait for them to finish
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def twin_step_times(trainer: Any, *, steps: int = 5) -> list[float] | None:
    """Seconds of ``steps`` compute-only steps on an unsynchronised twin of the model (see module doc)."""
    import torch

    from dpbench.strategies._precision import Precision
    from dpbench.strategies.base import call_model, to_device

    device = trainer.local_devices()[0]
    twin = trainer.twin_module(trainer.build_model().to(device))
    share = trainer.compute_only_share(twin)
    if share is None:
        return None
    forward = trainer.maybe_compile(twin)
    optimizer = trainer.make_optimizer(share)
    precision = Precision(trainer.spec.options.precision, trainer.spec.device_type)
    inputs, target = trainer.local_batch(0)
    inputs, target = to_device(inputs, device), to_device(target, device)
    weight = trainer.loss_weight() if trainer.multiprocess else 1.0

    def step() -> None:
        # Zeroed, not freed: a share tensor that is not a twin parameter keeps its gradient.
        optimizer.zero_grad(set_to_none=False)
        with precision.autocast():
            loss = trainer.workload.loss(call_model(forward, inputs), target)
        precision.backward(loss * weight)
        precision.step([optimizer])

    # Warm-up (and compilation when compile=True: the worker beats meanwhile, and so does a rank
    # waiting in the barrier for a slower one's compile).
    with trainer.compiling():
        step()
        if trainer.multiprocess:
            import torch.distributed as dist

            dist.barrier(group=trainer.ctx.group)  # ranks run together: they share the cores as in a step
    times = []
    for _ in range(steps):
        _sync(trainer.cuda_devices)
        start = time.perf_counter()
        step()
        _sync(trainer.cuda_devices)
        times.append(time.perf_counter() - start)
    # Released before the cache is emptied (step() holds them through its closure cells).
    twin = forward = optimizer = None
    if trainer.cuda_devices:
        torch.cuda.empty_cache()
    return times


def memory_report(trainer: Any) -> dict[str, Any]:
    """What this rank holds now, and the peak of its timed steps (or of its lifetime so far)."""
    import torch

    from dpbench.strategies._metrics import local_bytes

    held = trainer.memory_tensors()
    report = {
        "rank": trainer.rank,
        "params_bytes": local_bytes(held["params"]),
        "grads_bytes": local_bytes(held["grads"]),
        "optimizer_state_bytes": local_bytes(held["optimizer_state"]),
    }
    peak = dict(trainer.timed_peak)
    if trainer.cuda_devices:
        report["peak_kind"] = "cuda_max_allocated"
        report["peak_bytes"] = peak.get("peak_bytes") or sum(
            int(torch.cuda.max_memory_allocated(d)) for d in trainer.cuda_devices
        )
        report["peak_reserved_bytes"] = peak.get("peak_reserved_bytes") or sum(
            int(torch.cuda.max_memory_reserved(d)) for d in trainer.cuda_devices
        )
    else:
        report["peak_kind"] = "cpu_peak_rss"
        report["peak_bytes"] = peak.get("peak_bytes") or int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
    return report


def _flops_and_tokens(trainer: Any) -> dict[str, Any]:
    from dpbench.strategies._metrics import count_step_flops_by_kind
    from dpbench.strategies._precision import Precision
    from dpbench.strategies.base import to_device

    spec = trainer.spec
    device = trainer.local_devices()[0]
    inputs, target = trainer.workload.batch(0, spec.global_batch, spec.seed)
    out: dict[str, Any] = {"tokens_per_step": None}
    if "tokens" in getattr(trainer.workload, "tags", ()):
        first = inputs[0] if isinstance(inputs, tuple) else inputs
        out["tokens_per_step"] = int(first.numel())  # token ids: batch × sequence length
    model = trainer.twin_module(trainer.build_model().to(device))
    precision = Precision(spec.options.precision, spec.device_type)
    kinds = count_step_flops_by_kind(
        model,
        to_device(inputs, device),
        to_device(target, device),
        trainer.workload.loss,
        autocast=precision.autocast(),
    )
    out["model_flops_per_step"] = sum(kinds.values())
    out["flops_by_kind"] = kinds  # conv vs matmul: they may run in different maths (TF32)
    return out


def gpu_keys(cuda_devices: list[str]) -> dict[str, dict[str, str]]:
    """``{key: {"device", "host", "name"}}`` of this worker's GPUs, keyed so that GPUs of
    different hosts never collapse: by UUID where torch reports one, else ``host/cuda:N``.
    Two ranks sharing one GPU give the same key, so it counts once."""
    import socket

    import torch

    host = socket.gethostname()
    out = {}
    for device in cuda_devices:
        uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)
        key = f"GPU-{uuid}" if uuid is not None else f"{host}/{device}"
        out[key] = {"device": device, "host": host, "name": torch.cuda.get_device_name(device)}
    return out


def rank_metrics(
    trainer: Any,
    *,
    matmul_parallel: int,
    heartbeat: Callable[[], None],
    known_peaks: Mapping[str, Sequence[float]] | None = None,
) -> dict[str, Any]:
    """This rank's part of the case metrics (every rank calls it at the same time). ``known_peaks``:
    the CPU matmul peak per rank by compute dtype, measured by an earlier case that shared the cores
    alike (``dpbench.launcher.run``); a rank takes its own entry instead of measuring again."""
    import torch

    # Building the twin and the FLOP-count copy reseeds torch's RNG: restore it afterwards so
    # a workload drawing random numbers (dropout) continues exactly as if nothing had run.
    indices = [torch.device(d).index for d in trainer.cuda_devices]
    with torch.random.fork_rng(devices=indices):
        return _rank_metrics(trainer, matmul_parallel=matmul_parallel, heartbeat=heartbeat, known=known_peaks or {})


def _rank_metrics(
    trainer: Any, *, matmul_parallel: int, heartbeat: Callable[[], None], known: Mapping[str, Sequence[float]]
) -> dict[str, Any]:
    import torch

    out: dict[str, Any] = {"memory": memory_report(trainer)}  # first: before any profiling allocation
    barrier = _barrier(trainer)
    if trainer.rank == 0:
        out.update(_flops_and_tokens(trainer))
    heartbeat()
    barrier()
    out["compute_only_times"] = twin_step_times(trainer)
    heartbeat()
    plan = trainer.collective_plan()
    if plan and trainer.multiprocess:
        out["collective_time_s"] = replay_seconds(
            plan,
            device=trainer.ctx.device,
            group=trainer.ctx.group,
            world_size=trainer.spec.world_size,
            cuda_devices=trainer.cuda_devices,
            groups=trainer.collective_groups() if hasattr(trainer, "collective_groups") else None,
        )
    heartbeat()
    out["compute_dtype"] = trainer.compute_dtype()
    out["replica_concurrency"] = trainer.replica_concurrency()
    if not trainer.cuda_devices and out["compute_dtype"] in known:
        # Every rank holds the same map and dtype, so all reuse or all measure (at one barrier).
        out["matmul_flops_per_s"] = float(known[out["compute_dtype"]][trainer.rank])
    elif not trainer.cuda_devices:
        from dpbench.strategies._metrics import measure_matmul_flops

        barrier()  # every worker measures at once: the peak of the cores the case shares
        dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[out["compute_dtype"]]
        out["matmul_flops_per_s"] = measure_matmul_flops(dtype=dtype, parallel=matmul_parallel)
    out["gpus"] = gpu_keys(trainer.cuda_devices)
    if trainer.cuda_devices:
        from dpbench.strategies._metrics import fp32_math

        out["fp32_math"] = fp32_math(torch)  # TF32 or not: which peak an fp32 step is judged by
    out["compile_time_s"] = trainer.compile_time_s
    out["shard_units"] = getattr(trainer, "shard_units", None)  # fsdp: its units (dpbench.strategies.fsdp)
    return out


def _barrier(trainer: Any) -> Callable[[], None]:
    if not trainer.multiprocess:
        return lambda: None
    import torch.distributed as dist

    return lambda: dist.barrier(group=trainer.ctx.group)


def combine(
    per_rank: list[dict[str, Any]], *, device_type: str, options: CommonOptions, environ: Any = None
) -> dict[str, Any]:
    """The per-rank answers as one JSON-safe dict (see ``Run.case_metrics``)."""
    from dpbench.strategies._metrics import math_mode, peak_flops

    first = per_rank[0]
    dtype = first["compute_dtype"]
    gpus: dict[str, dict[str, str]] = {}
    for r in per_rank:
        gpus.update(r["gpus"])  # ranks sharing a GPU give the same key: it counts once
    maths = math_mode(dtype, first.get("fp32_math")) if device_type == "cuda" else None
    peak, source = peak_flops(
        device_type=device_type,
        device_names=[g["name"] for g in gpus.values()],
        dtype=dtype,
        environ=environ,
        maths=maths,
        flops_by_kind=first.get("flops_by_kind"),
    )
    if peak is None and device_type == "cpu":
        peak, source = float(sum(r["matmul_flops_per_s"] for r in per_rank)), "measured:cpu-matmul"
    compute = [r["compute_only_times"] for r in per_rank]
    compute_only = None
    if all(times for times in compute):
        # A step is as slow as its slowest rank; the median over steps damps one noisy step.
        compute_only = statistics.median(max(step) for step in zip(*compute))
    collective = [r.get("collective_time_s") for r in per_rank]
    compile_times = [r["compile_time_s"] for r in per_rank if r["compile_time_s"] is not None]
    return {
        "model_flops_per_step": first["model_flops_per_step"],
        "peak_flops_per_s": peak,
        "peak_source": source,
        "compute_dtype": dtype,
        "math_mode": maths,
        "flops_by_kind": first.get("flops_by_kind"),
        "gpu_keys": sorted(gpus),  # the distinct GPUs the peak sums over (UUID or host/cuda:N)
        "compute_only_step_s": compute_only,
        "collective_time_s": max(collective) if all(c is not None for c in collective) else None,
        "memory_per_rank": [r["memory"] for r in per_rank],
        "compile_time_s": max(compile_times) if compile_times else None,
        "shard_units": first.get("shard_units"),
        # dp/manual replicas sharing a GPU: one line saying they ran serially (None otherwise).
        "replica_concurrency": first.get("replica_concurrency"),
        "tokens_per_step": first["tokens_per_step"],
        "precision": options.precision,
        "optimizer": options.optimizer,
    }
