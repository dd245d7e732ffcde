"""``dpbench.launch``: validate, start the workers once, and drive training steps in them.

Every strategy runs in spawned workers, so the calling process (pytest, a notebook) never
initialises CUDA: multi-process strategies (ddp, allreduce) get one process per rank;
in-process ones (single, dp, manual, torch-dp) get one worker process holding all replicas.
"""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any

from dpbench.launcher.run_info import RunInfo
from dpbench.launcher.step_stats import StepStats
from dpbench.workers.base import Pool, WorkerError, default_threads
from dpbench.workers.provider import make_pool, placement_for

if TYPE_CHECKING:
    from dpbench.strategies.configs import StrategyConfig

__all__ = ["launch", "Run"]

# A relative difference's floor for a scale of zero (a model whose parameters are all zero).
_TINY = 1e-300

# The CPU's matmul peak per rank (the MFU denominator on a CPU), measured by the first case of each
# way of sharing the cores this process runs, then reused: keyed by (processes, Python threads per
# worker, torch threads per worker, the affinity plan) and then by the compute dtype. Every
# configuration of a run that shares the cores alike is then judged against one peak, not against a
# fresh noisy reading each, and a case's metrics cost its ranks ~0.4 s less each.
_CPU_PEAKS: dict[tuple[Any, ...], dict[str, list[float]]] = {}


def launch(
    strategy: str | StrategyConfig,
    workload: Any,
    *,
    world_size: int = 1,
    global_batch: int = 64,
    device: str = "cpu",
    seed: int = 0,
    lr: float = 0.1,
    timeout: float = 60.0,
    threads_per_worker: int | None = None,
    **options: Any,
) -> Run:
    """Start ``strategy`` training ``workload``; return a :class:`Run` (also a context manager).

    ``strategy`` is a registered name, a configuration as ``dpbench run --strategies`` takes one
    (``"fsdp@replicate=2"``) or one already parsed (a :class:`dpbench.strategies.configs.StrategyConfig`).
    ``workload`` is a registered name or a :class:`dpbench.Workload`. ``options`` are the
    strategy's own (see ``dpbench.strategies.get_strategy(name).option_defaults``), beside those
    the configuration names; one named in both is refused. All
    arguments are checked before any process starts, and so is the memory: a case whose estimate
    exceeds the free device memory raises :class:`dpbench.launcher.fit.DoesNotFit` (a
    ``StrategyUnavailable``; see :mod:`dpbench.launcher.fit` for the switches).
    """
    from dpbench.workloads.main_module import refuse_unguarded_launch

    # First: in a script without the main guard every worker would run this call again.
    refuse_unguarded_launch()
    from dpbench.strategies import get_strategy
    from dpbench.strategies.base import RunSpec, StrategyUnavailable
    from dpbench.strategies.configs import StrategyConfig, merge_options, split_config
    from dpbench.workloads.base import Workload, check_first_batch, check_picklable

    parsed = None  # a configuration parsed where it was named: checked here, not parsed again
    if isinstance(strategy, StrategyConfig):
        if options:
            options = merge_options(strategy.spec, strategy.as_dict(), options, given_as="the keywords")
        else:
            parsed = strategy.typed
        strategy = strategy.strategy
    elif isinstance(strategy, str) and "@" in strategy:
        name, named = split_config("strategy", strategy)
        options = merge_options(strategy, named, options, given_as="the keywords")
        strategy = name
    strategy_cls = get_strategy(strategy)
    workload = _resolve_workload(workload, Workload)
    _check_int("world_size", world_size, minimum=1)
    _check_int("global_batch", global_batch, minimum=1)
    if global_batch < world_size:
        raise ValueError(
            f"global_batch must be >= world_size so every replica gets at least one sample, "
            f"got global_batch={global_batch} with world_size={world_size}"
        )
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():  # queries the driver; creates no CUDA context here
            raise StrategyUnavailable("device='cuda' needs CUDA, but torch.cuda.is_available() is False")
    _check_int("seed", seed, minimum=0)
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real) or not lr > 0:
        raise ValueError(f"lr must be a positive number, got {lr!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if threads_per_worker is not None:
        _check_int("threads_per_worker", threads_per_worker, minimum=1)
    # Parsed once (here, or where the configuration was named): the dataclass travels to the
    # placement, the estimate and the workers; a parsed one is checked on this device and world.
    if parsed is not None:
        resolved = parsed
        resolved.check(device=device, world_size=world_size, global_batch=global_batch)
    else:
        resolved = strategy_cls.parse_options(options, device=device, world_size=world_size, global_batch=global_batch)
    # dpbench.cluster: under a cluster session a multi-process strategy's ranks spread over the nodes.
    placement = placement_for(strategy_cls, world_size=world_size, device=device, options=resolved)
    check_picklable(workload)
    if resolved.checkpoint:  # a model with no blocks has nothing to recompute one by one: say so here
        from dpbench.strategies.checkpointing import check_checkpointable

        check_checkpointable(workload)
    # Will it fit? Before any process starts (DoesNotFit: the suites skip the case with the reason).
    from dpbench.launcher.fit import check_fits

    memory_estimate = check_fits(
        strategy_cls,
        workload,
        world_size=world_size,
        global_batch=global_batch,
        device=device,
        devices=placement.devices,
        processes=placement.processes,
        options=resolved,
        backend=placement.backend,
    )
    # A batch of the wrong size would only fail inside one rank's slice: build step 0 here (CPU).
    check_first_batch(workload, global_batch=global_batch, seed=int(seed))
    threads = threads_per_worker or default_threads(placement.concurrent_replicas)
    spec = RunSpec(
        strategy=strategy_cls.name,
        options=resolved,
        world_size=world_size,
        global_batch=global_batch,
        per_replica_batch=tuple(strategy_cls.per_replica_batch(global_batch, world_size, resolved)),
        device_type=device,
        devices=placement.devices,
        backend=placement.backend,
        seed=int(seed),
        lr=float(lr),
        threads_per_worker=threads,
    )
    run = Run(spec, workload, placement=placement, timeout=float(timeout))
    run.memory_estimate = memory_estimate  # reported beside the measured memory (case_metrics)
    return run


class Run:
    """A started training run: workers are up and the model is built, nothing is timed yet.

    ``info``: a :class:`~dpbench.launcher.run_info.RunInfo`, what it trains, with what, and where.
    """

    def __init__(self, spec: Any, workload: Any, *, placement: Any, timeout: float):
        self.spec = spec
        self.workload = workload
        self._placement = placement
        self._pool: Pool | None = None
        # dpbench.cluster: the remote pool when a cluster session is active and the ranks form a group.
        from dpbench.strategies import get_strategy

        self._pool = make_pool(
            placement.processes,
            device=spec.device_type,
            backend=placement.backend,
            timeout=timeout,
            threads_per_worker=spec.threads_per_worker,
            process_group=placement.backend is not None,
            # Longer than `timeout` where set-up compiles: ranks finish compiling at different times.
            collective_timeout=get_strategy(spec.strategy).collective_timeout(spec.options, timeout=timeout),
        )
        try:
            self._pool.run(_setup_worker, spec, workload)
        except BaseException as exc:
            self.close()
            _name_workload(exc, workload.name)
            raise
        # dpbench.cluster: nodes, ranks_per_node, hosts (one host: 1 node of world_size ranks); under a
        # cluster, "devices" keeps this host's, the ones a sampler here can watch.
        layout = self._pool.layout(world_size=spec.world_size)
        devices = [d for r, d in enumerate(spec.devices) if self._pool.on_head_node(r)]
        self.info = RunInfo(
            strategy=spec.strategy,
            options=spec.options.as_dict(),
            workload=workload.name,
            workload_params=dict(getattr(workload, "params", None) or {}),
            world_size=spec.world_size,
            device_type=spec.device_type,
            backend=spec.backend,
            global_batch=spec.global_batch,
            per_replica_batch=list(spec.per_replica_batch),
            threads_per_worker=spec.threads_per_worker,
            seed=spec.seed,
            lr=spec.lr,
            devices=devices,
            processes=placement.processes,
            timeout=timeout,
            # Where each rank ran and with what (affinity, threads, cudnn, NCCL/GLOO settings).
            workers=list(self._pool.worker_facts),
            affinity=self._pool.affinity_plan,
            nodes=layout.nodes,
            ranks_per_node=layout.ranks_per_node,
            hosts=layout.hosts,
        )

    @property
    def pids(self) -> list[int]:
        return [] if self._pool is None else self._pool.pids

    def step(self, k: int = 1) -> StepStats:
        """Run ``k`` training steps in the workers and return their synchronised measurements.

        ``step_times``: per step, the slowest rank's time (each rank stops its clock after
        synchronising its device). ``losses``: the global-batch mean loss of each step.
        ``phases``: mean seconds per step of each phase, averaged over ranks.
        ``peak_memory_bytes``: per device label, over this call (CUDA) or the worker's
        lifetime (CPU RSS). Steps continue the batch sequence of earlier calls.
        """
        _check_int("k", k, minimum=1)
        try:
            per_rank = self._live_pool().run(_steps_worker, k)
        except Exception as exc:
            _name_workload(exc, self.info.workload)
            raise
        # The slowest rank sets the pace of a synchronous step.
        step_times = [max(times) for times in zip(*(r["times"] for r in per_rank))]
        # Each rank sent (n_local / N) * local mean loss: the sum is the global-batch mean.
        losses = [sum(parts) for parts in zip(*(r["loss_parts"] for r in per_rank))]
        phase_names = sorted({name for r in per_rank for name in r["phases"]})
        phases = {name: sum(r["phases"].get(name, 0.0) for r in per_rank) / len(per_rank) for name in phase_names}
        memory: dict[str, int] = {}
        for rank, r in enumerate(per_rank):
            for label, peak in r["memory"].items():
                # Ranks sharing one GPU each hold their own allocations on it; another node's
                # cuda:0 is another GPU (dpbench.cluster), so it keeps its host's name.
                label = self._memory_label(rank, label)
                memory[label] = memory.get(label, 0) + peak
        return StepStats(
            step_times=step_times,
            global_batch=self.spec.global_batch,
            losses=losses,
            phases=phases,
            peak_memory_bytes=memory,
            # Every rank's, summed (ranks on other nodes included): the host-side cost of the steps.
            minor_faults=sum(int(r.get("minor_faults", 0)) for r in per_rank),
            # A step any rank's loss scaler skipped (ranks agree unless their gradients differ).
            skipped_steps=sorted({int(i) for r in per_rank for i in r.get("skipped_steps", ())}),
        )

    def _memory_label(self, rank: int, label: str) -> str:
        """``label`` on this host (the devices the sampler here watches), ``host/label`` elsewhere."""
        pool = self._live_pool()
        if pool.on_head_node(rank):
            return label
        return f"{pool.host_of(rank)}/{label}"

    def parameters(self) -> dict[str, Any]:
        """``{name: CPU tensor}`` of the trained model on rank 0 / replica 0."""
        return self._live_pool().run(_parameters_worker)[0]

    def buffers(self) -> dict[str, Any]:
        """``{name: CPU tensor}`` of the trained model's buffers (BatchNorm running stats) on rank 0 / replica 0."""
        return self._live_pool().run(_buffers_worker)[0]

    def evaluate(self, split: Any) -> dict[str, Any]:
        """Test accuracy of the model trained so far on ``split`` (a :class:`dpbench.workloads.splits.Split`).

        The same code for every strategy: each rank hands over its full parameters and buffers
        (sharded strategies gather them, a collective), and rank 0 loads them into a fresh
        model of the workload and evaluates it in ``eval()`` mode on its own device
        (:func:`dpbench.workloads.splits.evaluate_state`). Untimed: no step time includes it,
        and training state is not changed. Returns ``accuracy``, ``loss``, ``samples``,
        ``eval_s``, ``device``.
        """
        return self._live_pool().run(_evaluate_worker, split)[0]

    def fingerprint(self) -> dict[str, Any]:
        """The model as it stands, reduced the same way under every strategy (untimed; call between
        :meth:`step` calls, never inside one): ``step`` (steps trained so far), rank 0's float64
        ``param_sum``, ``param_abs_sum``, ``param_sq_sum`` and ``param_count`` over the full
        parameters (fsdp adds up its replica's shards with one all-reduce over the replica's ranks, a
        collective they join; under HSDP each rank reports its own replica group's sums),
        ``precision`` (the coarsest a step rounds to), ``exempt`` (why a stateful workload is not
        expected to match ``single``, or None) and ``rank_spread``: the largest relative difference
        of any rank's sums from rank 0's (0.0 when the replicas agree bit for bit). Training state
        is not changed (:mod:`dpbench.strategies.fingerprint`).
        """
        per_rank = self._live_pool().run(_fingerprint_worker)
        first = dict(per_rank[0])
        spread = 0.0
        for other in per_rank[1:]:
            for key, scale in (("param_sum", "param_abs_sum"), ("param_sq_sum", "param_sq_sum")):
                spread = max(spread, abs(other[key] - first[key]) / max(abs(first[scale]), _TINY))
        first["rank_spread"] = spread
        return first

    def control(self) -> float:
        """Seconds of the fixed control computation (:mod:`dpbench.launcher.control`) in these workers.

        Every rank runs it at once, with the run's threads on the run's devices; the slowest
        rank's median counts, as for a step.
        """
        from dpbench.launcher.control import control_worker

        return max(self._live_pool().run(control_worker))

    def case_metrics(self) -> dict[str, Any]:
        """Untimed measurements of this case, taken in the workers (call after the timed steps).

        Keys (JSON-safe; None where a key does not apply): ``model_flops_per_step`` (one
        forward + backward of the global batch, counted by torch's FlopCounterMode),
        ``peak_flops_per_s`` and ``peak_source`` (``"table:<gpu>"``, ``"env:DPBENCH_PEAK_TFLOPS"``
        or ``"measured:cpu-matmul"``), ``compute_dtype``, ``compute_only_step_s`` (ddp, zero,
        fsdp: the rank's compute with gradient sync off, slowest rank, median step),
        ``collective_time_s`` (the step's collectives replayed alone), ``memory_per_rank``
        (per worker: ``params_bytes``, ``grads_bytes``, ``optimizer_state_bytes``,
        ``peak_bytes``, ``peak_kind``, on CUDA ``peak_reserved_bytes``), ``compile_time_s``, ``replica_concurrency``,
        ``tokens_per_step`` (workloads tagged "tokens"), ``precision``, ``optimizer``,
        ``memory_estimate`` (the estimate checked before launch, ``CaseEstimate.to_dict()``; None
        when the check was off).
        :func:`dpbench.measure.derive.derive` turns them and a step time into MFU, tokens/s and
        exposed communication. Training state is not changed.
        """
        import os

        from dpbench.strategies.profiling import combine

        placement = self._placement
        # Python threads per worker measuring the CPU peak at once: DataParallel's replicas.
        parallel = max(1, placement.concurrent_replicas // placement.processes)
        key = self._cpu_peak_key(parallel)
        known = _CPU_PEAKS.get(key, {}) if key is not None else {}
        per_rank = self._live_pool().run(_case_metrics_worker, parallel, known)
        readings = [r.get("matmul_flops_per_s") for r in per_rank]  # measured now, or the known ones
        if key is not None and all(isinstance(m, float) for m in readings):
            _CPU_PEAKS.setdefault(key, {})[per_rank[0]["compute_dtype"]] = readings  # type: ignore[assignment]
        metrics = combine(per_rank, device_type=self.spec.device_type, options=self.spec.options, environ=os.environ)
        metrics["memory_estimate"] = getattr(self, "memory_estimate", None)
        return metrics

    def trace(self, k: int = 3, path: Any = "traces", *, warmup: int = 1) -> Any:
        """Profile ``k`` more training steps (after ``warmup`` untraced profiler warm-up steps) with
        torch.profiler and write one gzipped Chrome trace per rank, ``<path>/rank<r>.json.gz``.

        Call it after the timed steps: traced steps continue the batch sequence and are never
        timed steps. Returns a :class:`dpbench.launcher.tracing.TraceResult` (files, traced step
        times, or ``skip_reason`` when the strategy cannot be traced per rank: dp, torch-dp).
        ``dpbench.traces.analyse_case(result.files)`` gives the breakdown (see docs/traces.md).
        """
        from dpbench.launcher.tracing import trace_run

        return trace_run(self, self._live_pool(), k, path, warmup=warmup)

    def close(self) -> None:
        """Stop the workers; idempotent, safe after a failure."""
        if self._pool is not None:
            self._pool.close()

    def _cpu_peak_key(self, parallel: int) -> tuple[Any, ...] | None:
        """How this case shares the cores (:data:`_CPU_PEAKS`' key); None where the peak is not
        measured here (CUDA) or the ranks span nodes (their cores are not this host's)."""
        import json

        if self.spec.device_type != "cpu" or self.info.nodes != 1:
            return None
        plan = json.dumps(self.info.affinity, sort_keys=True, default=str)
        return (self._placement.processes, parallel, self.spec.threads_per_worker, plan)

    def _live_pool(self) -> Pool:
        if self._pool is None or self._pool.closed:
            raise RuntimeError("this Run is closed (after close() or a worker failure); launch a new one")
        return self._pool

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Run(strategy={self.spec.strategy!r}, workload={self.workload.name!r}, "
            f"world_size={self.spec.world_size}, device={self.spec.device_type!r})"
        )


# -- worker-side entry points (module-level so they pickle by reference) -----------------
def _setup_worker(ctx: Any, spec: Any, workload: Any) -> None:
    from dpbench.strategies import get_strategy

    trainer = get_strategy(spec.strategy)(spec, workload, ctx)
    trainer.setup()
    ctx.state["trainer"] = trainer


def _steps_worker(ctx: Any, k: int) -> dict[str, Any]:
    return ctx.state["trainer"].run_steps(k, heartbeat=ctx.heartbeat)


def _parameters_worker(ctx: Any) -> dict[str, Any] | None:
    # Every rank joins (sharded strategies gather full tensors with a collective); only rank 0
    # ships its tensors, the others would send identical copies.
    params = ctx.state["trainer"].parameters()
    return params if ctx.rank == 0 else None


def _fingerprint_worker(ctx: Any) -> dict[str, Any]:
    return ctx.state["trainer"].fingerprint()


def _buffers_worker(ctx: Any) -> dict[str, Any] | None:
    buffers = ctx.state["trainer"].buffers()
    return buffers if ctx.rank == 0 else None


def _evaluate_worker(ctx: Any, split: Any) -> dict[str, Any] | None:
    from dpbench.workloads.splits import evaluate_state

    trainer = ctx.state["trainer"]
    params, buffers = trainer.parameters(), trainer.buffers()  # every rank: sharded ones gather
    if ctx.rank != 0:
        return None
    return evaluate_state(
        trainer.workload,
        params,
        buffers,
        split,
        device=trainer.local_devices()[0],
        cache=ctx.state,
        heartbeat=ctx.heartbeat,
    )


def _case_metrics_worker(ctx: Any, matmul_parallel: int, known_peaks: dict[str, list[float]]) -> dict[str, Any]:
    from dpbench.strategies.profiling import rank_metrics

    return rank_metrics(
        ctx.state["trainer"], matmul_parallel=matmul_parallel, heartbeat=ctx.heartbeat, known_peaks=known_peaks
    )


def _name_workload(exc: BaseException, name: str) -> None:
    """A worker's failure says which workload (its spec) it was training."""
    if isinstance(exc, WorkerError):
        exc.add_note(f"(while training workload {name})")


def _resolve_workload(workload: Any, workload_cls: type) -> Any:
    if isinstance(workload, workload_cls):
        return workload
    if isinstance(workload, str):
        from dpbench.workloads import resolve_workload

        return resolve_workload(workload)
    raise TypeError(
        f"workload must be a workload spec (str: a registered name, MODULE:ATTR, path/to/file.py:ATTR or "
        f"hf:MODEL_TYPE) or a dpbench.Workload, got {type(workload).__name__}"
    )


def _check_int(name: str, value: Any, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
