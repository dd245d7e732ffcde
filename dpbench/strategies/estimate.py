"""Will it fit? The memory each worker of a case needs, estimated in the parent.

:class:`Estimator` builds the workload's model once on the meta device (its parameters) and,
when activations are asked for, once under ``FakeTensorMode`` (the peak of one forward +
backward per batch size, cached); :meth:`Estimator.case` asks the strategy class for its rules
(:meth:`~dpbench.strategies.base.Strategy.memory_estimate`,
:meth:`~dpbench.strategies.base.Strategy.peak_estimate`). Estimated for a GPU, each worker also
holds CUDA's library workspaces on every device it computes on, a line item of their own
(:mod:`~dpbench.strategies.workspaces`); for a CPU there are none. Nothing real is allocated.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dpbench.schema import DEFAULT_OPTIMIZER, DEFAULT_PRECISION, OPTIMIZERS, PRECISIONS
from dpbench.strategies._options import CommonOptions
from dpbench.strategies.memory import ParamShape, model_params
from dpbench.strategies.workspaces import CudaWorkspaces

__all__ = ["CaseEstimate", "Estimator", "RankEstimate", "EstimateError"]


class EstimateError(ValueError):
    """The workload's model cannot be built on the meta device, or a case cannot be estimated (one line)."""


@dataclass(kw_only=True, frozen=True)
class RankEstimate:
    """One worker process's estimate, in bytes (the first four as ``memory_per_rank`` measures them)."""

    rank: int
    """The worker's rank (0 for in-process strategies: one worker holds every replica)."""

    params_bytes: int
    """Parameters this worker holds (its shards for fsdp)."""

    grads_bytes: int
    """Gradients after a step."""

    optimizer_state_bytes: int
    """Optimizer state (its partition for zero)."""

    comm_buffer_bytes: int
    """Communication buffers kept between steps (DDP buckets, allreduce's flat buckets)."""

    activation_bytes: int | None
    """One forward + backward at this worker's batch, at its peak, beyond the gradients (None: not estimated)."""

    peak_bytes: int | None
    """Estimated peak of a step: state, buffers and the forward + backward on top, and the CUDA
    workspaces on a GPU (None: not estimated)."""

    workspace_bytes: int = 0
    """CUDA's library workspaces on this worker's devices (:mod:`~dpbench.strategies.workspaces`;
    0 on a CPU), held from the first matmul on, so counted in the peak and in the need."""

    def held_bytes(self) -> int:
        """What the worker holds between steps: the state, its buffers and the workspaces."""
        return (
            self.params_bytes
            + self.grads_bytes
            + self.optimizer_state_bytes
            + self.comm_buffer_bytes
            + self.workspace_bytes
        )

    def need_bytes(self) -> int:
        """Its peak when estimated, else what it holds between steps."""
        return self.peak_bytes if self.peak_bytes is not None else self.held_bytes()


@dataclass(kw_only=True, frozen=True)
class CaseEstimate:
    """A strategy × world size: every worker's estimate."""

    strategy: str
    world_size: int
    global_batch: int
    precision: str
    optimizer: str
    parameter_count: int
    ranks: tuple[RankEstimate, ...]
    cuda_workspaces: CudaWorkspaces | None = None
    """The workspaces counted per CUDA device (None: estimated for a CPU, none counted)."""

    def need_bytes(self) -> int:
        """The most any worker needs: its peak when estimated, else what it holds between steps."""
        return max(r.need_bytes() for r in self.ranks)

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {
            **asdict(self),
            "ranks": [asdict(r) for r in self.ranks],
            "cuda_workspaces": None if self.cuda_workspaces is None else self.cuda_workspaces.to_dict(),
            "need_bytes": self.need_bytes(),
        }


def _check_name(argument: str, value: str, known: tuple[str, ...]) -> None:
    if value not in known:
        raise EstimateError(f"{argument}: expected one of {', '.join(known)}, found {value!r}")


class Estimator:
    """One workload's estimates for any strategy, world size and batch (see the module doc)."""

    def __init__(self, workload: Any, *, activations: bool = True, seed: int = 0) -> None:
        import torch

        from dpbench.workloads import resolve_workload

        self.workload = resolve_workload(workload)
        self.spec = self.workload.params.get("spec", self.workload.name)
        self.activations = activations
        self.seed = seed
        try:
            with torch.device("meta"):
                model = self.workload.model()
        except Exception as exc:  # the model's own error, whatever it is: one line with the spec
            raise EstimateError(
                f"workload {self.spec!r}: the model cannot be built on the meta device: {type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else ''}"
            ) from None
        self._meta = model
        self._blocks: dict[tuple[str, ...], tuple[ParamShape, ...]] = {}
        self.params: tuple[ParamShape, ...] = self.params_with_blocks(tuple(self.workload.blocks))
        self.parameter_count = sum(p.numel for p in self.params)
        self._fakes: dict[bool, Any] = {}
        self._peaks: dict[tuple[int, str, bool], int] = {}

    def params_with_blocks(self, names: tuple[str, ...]) -> tuple[ParamShape, ...]:
        """The parameters tagged with the blocks ``names`` picks (detected when empty; cached)."""
        if names not in self._blocks:
            from dpbench.strategies.blocks import find_blocks

            self._blocks[names] = model_params(self._meta, find_blocks(self._meta, names)[0])
        return self._blocks[names]

    def activation(self, batch: int, precision: str, *, checkpoint: bool = False) -> int:
        """What one forward + backward at ``batch`` samples in ``precision`` holds at its peak beyond
        the gradients it builds (activations and temporaries; never below 0); ``checkpoint``: with
        each block recomputed in backward."""
        grads = sum(p.nbytes for p in self.params if p.trainable)
        return max(0, self.step_peak(batch, precision, checkpoint=checkpoint) - grads)

    def step_peak(self, batch: int, precision: str, *, checkpoint: bool = False) -> int:
        """Peak bytes of one forward + backward at ``batch`` samples in ``precision``, gradients included (cached)."""
        key = (batch, precision, checkpoint)
        if key not in self._peaks:
            if checkpoint not in self._fakes:
                from dpbench.strategies.activations import FakeStep

                try:
                    self._fakes[checkpoint] = FakeStep(self.workload, seed=self.seed, checkpoint=checkpoint)
                except Exception as exc:
                    raise EstimateError(
                        f"workload {self.spec!r}: the model cannot be built under FakeTensorMode: "
                        f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                    ) from None
            try:
                self._peaks[key] = self._fakes[checkpoint].peak(batch, precision=precision)
            except Exception as exc:  # a step that reads a value (data-dependent), an op fake tensors refuse
                raise EstimateError(
                    f"workload {self.spec!r}: one forward + backward cannot run on fake tensors: "
                    f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                ) from None
        return self._peaks[key]

    def case(
        self,
        strategy: str,
        *,
        world_size: int,
        global_batch: int,
        options: CommonOptions | Mapping[str, Any] | None = None,
        cuda: CudaWorkspaces | None = None,
    ) -> CaseEstimate:
        """The estimate of ``strategy`` at ``world_size``; a world size or option the strategy refuses
        raises its own error (``ValueError``). ``options``: the strategy's parsed options, taken as
        checked where they were parsed (a launch's, on its device), or the names a user set
        (``dpbench estimate``), parsed and checked here. ``cuda``: the workspaces each CUDA device
        holds (:func:`~dpbench.strategies.workspaces.cuda_workspaces`), counted per device a worker
        computes on (every replica's for an in-process strategy); None: a CPU, none counted."""
        from dpbench.strategies import StrategyUnavailable, get_strategy

        if not isinstance(options, CommonOptions):
            options = dict(options or {})
            _check_name("precision", options.get("precision", DEFAULT_PRECISION), PRECISIONS)
            _check_name("optimizer", options.get("optimizer", DEFAULT_OPTIMIZER), OPTIMIZERS)
        cls = get_strategy(strategy)
        if global_batch < world_size:  # launch's own rule: every replica gets at least one sample
            raise ValueError(
                f"global_batch must be >= world_size so every replica gets at least one sample, "
                f"got global_batch={global_batch} with world_size={world_size}"
            )
        # Checked as for CUDA, placed as on CPU: the estimate answers for a GPU machine too, so a
        # CPU-only refusal (torch-dp) is not the question; a world size the strategy refuses is.
        if isinstance(options, CommonOptions):
            if not isinstance(options, cls.options_type):
                raise TypeError(f"options: expected {cls.options_type.__name__}, found {type(options).__name__}")
            resolved = options
        else:
            resolved = cls.parse_options(options, device="cuda", world_size=world_size, global_batch=global_batch)
        try:
            cls.placement(world_size=world_size, device="cpu", options=resolved)
        except StrategyUnavailable:
            pass
        units = getattr(resolved, "units", None)
        if units:  # fsdp's units option: the named blocks; an unknown class is the user's error
            from dpbench.strategies.blocks import parse_units

            try:
                params = self.params_with_blocks(parse_units(units))
            except ValueError as exc:
                raise ValueError(f"{strategy} option {exc}") from None
        else:
            params = self.params
        if resolved.checkpoint and all(p.block is None for p in self.params):
            raise ValueError(
                f"{strategy} option checkpoint: the model of {self.spec!r} has no blocks to recompute (no repeated "
                "composite modules, no _no_split_modules); name them with Workload(blocks=('MyBlock',))"
            )
        states = cls.memory_estimate(params, world_size=world_size, options=resolved)
        batches = cls.per_replica_batch(global_batch, world_size, resolved) if cls.multiprocess else [global_batch]
        workspace = 0 if cuda is None else cuda.per_device() * (1 if cls.multiprocess else world_size)
        ranks = []
        for rank, state in enumerate(states):
            activation = peak = None
            if self.activations:

                def act(batch: int) -> int:
                    return self.activation(batch, resolved.precision, checkpoint=resolved.checkpoint)

                batch = batches[rank] if rank < len(batches) else batches[-1]
                activation = act(batch)
                peak = workspace + cls.peak_estimate(
                    state, params=params, activation=act, batch=batch, world_size=world_size, options=resolved
                )
            ranks.append(
                RankEstimate(
                    rank=rank,
                    **state.to_dict(),
                    activation_bytes=activation,
                    peak_bytes=peak,
                    workspace_bytes=workspace,
                )
            )
        return CaseEstimate(
            strategy=strategy,
            world_size=world_size,
            global_batch=global_batch,
            precision=resolved.precision,
            optimizer=resolved.optimizer,
            parameter_count=self.parameter_count,
            ranks=tuple(ranks),
            cuda_workspaces=cuda,
        )
