"""``fsdp``: FSDP2 — ``torch.distributed.fsdp.fully_shard`` on a 1-D device mesh (HSDP: 2-D), one process per rank."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

from dpbench.schema import Phase, StrategyName
from dpbench.strategies._options import CompileOptions
from dpbench.strategies.base import Placement, Strategy, StrategyUnavailable, call_model, to_device
from dpbench.strategies.blocks import find_blocks, parse_units
from dpbench.strategies.schedule import ShardedUnits, StepSchedule

__all__ = ["FSDP", "FSDPOptions", "SHARD_UNITS", "MP_DTYPES", "gathers_in_backward", "parse_mixed_precision"]

SHARD_UNITS = ("block", "layer", "model")
MP_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def parse_mixed_precision(value: Any) -> tuple[str, str | None] | None:
    """``None``, ``"PARAM"`` or ``"PARAM/REDUCE"`` (each bf16, fp16 or fp32) → (param, reduce) names.

    ``"bf16"`` computes and reduces in bf16 (torch's default when reduce_dtype is None);
    ``"bf16/fp32"`` computes in bf16 and reduce-scatters gradients in fp32.
    """
    if value is None:
        return None
    parts = value.split("/") if isinstance(value, str) else []
    if len(parts) not in (1, 2) or any(part not in MP_DTYPES for part in parts):
        raise ValueError(
            f"fsdp option mixed_precision must be None, 'PARAM' or 'PARAM/REDUCE' with each of "
            f"{', '.join(MP_DTYPES)} (e.g. 'bf16' or 'bf16/fp32'), got {value!r}"
        )
    return parts[0], (parts[1] if len(parts) == 2 else None)


@dataclass(frozen=True, kw_only=True)
class FSDPOptions(CompileOptions):
    """``fsdp``'s options: what is sharded together, when it is gathered, in which dtypes and where it lives.

    ``compile`` wraps the sharded model in ``torch.compile``.
    """

    strategy = StrategyName.FSDP.value

    reshard_after_forward: bool | int = True
    """Free gathered parameters after forward (ZeRO-3-like); False: keep them (ZeRO-2-like); an int: a group size.

    An int is FSDP2's reshard to a smaller group of ranks after forward (e.g. the ranks of one node), so
    backward gathers within a group; it must divide the world size (1 is False, the world size True).
    The root unit never reshards after forward, as FSDP2 decides.
    """

    shard: str = "block"
    """fully_shard units: "block" (each block, then the root), "layer" (each top-level child) or "model".

    "layer" shards each top-level child with parameters, then the root. The blocks
    (:mod:`dpbench.strategies.blocks`): a Hugging Face model's ``_no_split_modules``, a
    transformer's layers, a ResNet's residual blocks; a model without blocks is sharded by its
    top-level children.
    """

    replicate: int = 1
    """HSDP: that many groups of ranks, each sharding a full replica within it, all-reduced across groups.

    ``replicate=R`` at world size W shards over W/R ranks (a 2-D device mesh, replicate × shard, as
    FSDP2's ``fully_shard`` takes it); R must divide W. 1: plain FSDP.
    """

    units: str | None = None
    """With shard="block": the blocks' module classes by name ("MyBlock" or "A,B") instead of the detected ones.

    A :attr:`dpbench.Workload.blocks` of the workload does the same for every case.
    """

    mixed_precision: str | None = None
    """None, or ``"PARAM"`` / ``"PARAM/REDUCE"`` dtypes for FSDP's ``MixedPrecisionPolicy`` (``"bf16/fp32"``).

    Each dtype is bf16, fp16 or fp32; fp16 needs CUDA (see :func:`parse_mixed_precision`).
    """

    cpu_offload: bool = False
    """CUDA only: ``CPUOffloadPolicy``, shards and the optimizer step in host memory."""

    def check(self, *, device: str, world_size: int, global_batch: int) -> None:
        super().check(device=device, world_size=world_size, global_batch=global_batch)
        self.require_bool("cpu_offload")
        replicate = self.replicate
        if isinstance(replicate, bool) or not isinstance(replicate, int) or replicate < 1 or world_size % replicate:
            raise ValueError(
                f"fsdp option replicate: expected a number of replica groups that divides the world size "
                f"{world_size}, found {replicate!r}"
            )
        shard = world_size // replicate
        reshard = self.reshard_after_forward
        if not isinstance(reshard, bool) and not (isinstance(reshard, int) and reshard >= 1 and shard % reshard == 0):
            within = (
                f"the world size {world_size}" if replicate == 1 else f"the {shard} ranks a replica is sharded over"
            )
            raise ValueError(
                f"fsdp option reshard_after_forward: expected True, False or a number of ranks that divides "
                f"{within}, found {reshard!r}"
            )
        if self.shard not in SHARD_UNITS:
            raise ValueError(f"fsdp option shard must be one of {', '.join(SHARD_UNITS)}, got {self.shard!r}")
        if self.units is not None:
            parse_units(self.units)
            if self.shard != "block":
                raise ValueError(f"fsdp option units names the blocks of shard='block', found shard={self.shard!r}")
        dtypes = parse_mixed_precision(self.mixed_precision)
        if dtypes is not None and "fp16" in dtypes and device != "cuda":
            raise StrategyUnavailable(
                "fsdp option mixed_precision with fp16 needs device='cuda': dpbench treats fp16 as CUDA-only "
                "(no loss scaling or fast fp16 kernels on CPU); use 'bf16' on CPU"
            )
        if self.cpu_offload and device != "cuda":
            raise StrategyUnavailable(
                "fsdp option cpu_offload=True needs device='cuda': it moves GPU shards and the optimizer step "
                "to host memory, and on CPU everything already is there"
            )


def _local_bytes(p: Any, world_size: int, rank: int, rows: Any) -> int:
    if not p.shape:
        return p.nbytes if rank == 0 else 0
    return rows(p.shape[0], world_size, rank) * (p.numel // p.shape[0]) * p.element_size


def _param_scale(options: FSDPOptions) -> float:
    """Gathered bytes per stored byte: 0.5 when FSDP gathers float32 parameters as bf16/fp16."""
    dtypes = parse_mixed_precision(options.mixed_precision)
    return 0.5 if dtypes is not None and dtypes[0] != "fp32" else 1.0


class FSDP(Strategy):
    """Fully sharded data parallel with FSDP2's ``fully_shard`` (gloo on CPU, nccl on CUDA).

    Every parameter is a ``DTensor`` sharded along dim 0 over the ranks; forward all-gathers
    each unit's parameters, backward reduce-scatters its gradients, and each rank's optimizer
    steps only its shards, so parameters, gradients and optimizer state all take ~1/W per rank.

    Options: :class:`FSDPOptions`. ``run.parameters()`` gathers full tensors
    (``DTensor.full_tensor()``, a collective every rank joins).

    Loss weighting is DDP's: FSDP averages gradients over ranks. BatchNorm: buffers are not
    sharded or synchronised; each rank keeps its own slice's running statistics (rank 0's are
    reported). Phases: forward (incl. all-gathers), backward (incl. reduce-scatters),
    optimizer.
    """

    name = StrategyName.FSDP.value
    multiprocess = True
    options_type = FSDPOptions

    @classmethod
    def placement(cls, *, world_size: int, device: str, options: FSDPOptions) -> Placement:
        if device == "cuda":
            import torch

            count = torch.cuda.device_count()
            if world_size > count:
                # NCCL cannot put two ranks on one GPU, and FSDP's all-gather / reduce-scatter
                # of CUDA tensors needs NCCL.
                raise StrategyUnavailable(
                    f"fsdp on CUDA needs one GPU per rank (nccl): world_size={world_size}, found {count} GPU(s)"
                )
            return Placement(
                processes=world_size,
                backend="nccl",
                devices=tuple(f"cuda:{r}" for r in range(world_size)),
                concurrent_replicas=world_size,
            )
        return Placement(
            processes=world_size, backend="gloo", devices=("cpu",) * world_size, concurrent_replicas=world_size
        )

    @classmethod
    def memory_estimate(cls, params: Any, *, world_size: int, options: FSDPOptions) -> list[Any]:
        """Each rank its dim-0 shard of every parameter, gradient and moment (in the parameters' own
        dtype: mixed precision casts only the gathered copies), and a step counter per parameter."""
        from dpbench.strategies.memory import StateMemory, fsdp_local_rows, optimizer_state_bytes

        out = []
        shard = world_size // options.replicate  # HSDP: rank r holds shard r % shard of its replica's
        for rank in range(world_size):
            local = [(p, _local_bytes(p, shard, rank % shard, fsdp_local_rows)) for p in params]
            out.append(
                StateMemory(
                    params_bytes=sum(n for _, n in local),
                    grads_bytes=sum(n for p, n in local if p.trainable),
                    optimizer_state_bytes=sum(
                        optimizer_state_bytes(options.optimizer, n) for p, n in local if p.trainable
                    ),
                )
            )
        return out

    @classmethod
    def peak_estimate(
        cls, state: Any, *, params: Any, activation: Any, batch: int, world_size: int, options: FSDPOptions
    ) -> int:
        """Approximate: the shards, the forward + backward's activations at the rank's batch, one
        unit's unsharded gradients (the reduce-scatter's input) and the gathered
        parameters (two units, the one computing and the one prefetched; every unit when it
        does not reshard after forward), in the mixed-precision dtype."""
        by_block = options.shard == "block" and any(p.block is not None for p in params)
        units: dict[Any, int] = {}
        for p in params:
            unit = None if options.shard == "model" else p.block if by_block else p.unit
            units[unit] = units.get(unit, 0) + p.nbytes
        root = units.pop(None, 0)  # gathered in the root's forward and kept until its backward
        sizes = sorted(units.values())
        reshard = options.reshard_after_forward
        if reshard is False or (reshard is not True and reshard == 1):
            gathered = root + sum(sizes)
        elif reshard is True or reshard == world_size // options.replicate:
            gathered = root + sum(sizes[-2:])  # the unit computing and the one prefetched
        else:  # kept over groups of `reshard` ranks after forward, the two in flight whole
            gathered = root + sum(sizes[-2:]) + sum(sizes[:-2]) // reshard
        largest = max([root, *sizes])  # one unit's unsharded gradients, before its reduce-scatter
        return state.held_bytes() + activation(batch) + largest + int(gathered * _param_scale(options))

    @classmethod
    def step_schedule(cls, options: FSDPOptions) -> StepSchedule:
        """Per unit an all-gather in forward and a reduce-scatter in backward, with a second all-gather
        in backward unless the units keep their parameters (``reshard_after_forward`` False, or a
        group of 1); HSDP (``replicate``) all-reduces the shards across the replica groups; the
        optimizer steps the shard."""
        again = gathers_in_backward(options.reshard_after_forward)
        return StepSchedule(
            gradients=ShardedUnits(gathers_in_backward=again, replicate=int(options.replicate or 1)),
            sharded_optimizer=True,
        )

    def make_precision(self) -> Any:
        from dpbench.strategies._precision import Precision

        def sharded_scaler() -> Any:
            from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

            # Each rank sees only its gradient shards: the scaler must agree on inf/NaN across ranks.
            return ShardedGradScaler(self.spec.device_type, process_group=self.ctx.group)

        return Precision(self.spec.options.precision, self.spec.device_type, scaler_factory=sharded_scaler)

    def setup(self) -> None:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        opts = self.spec.options
        self.device = self.ctx.device
        if opts.replicate > 1:  # HSDP: replicate × shard, FSDP2's 2-D mesh
            shape = (opts.replicate, self.spec.world_size // opts.replicate)
            mesh = init_device_mesh(self.device.type, shape, mesh_dim_names=("replicate", "shard"))
        else:
            mesh = init_device_mesh(self.device.type, (self.spec.world_size,))
        self.mesh = mesh
        kwargs = {"mesh": mesh, "reshard_after_forward": opts.reshard_after_forward, **self._policies()}
        model = self.build_model().to(self.device)
        self.units, found_by = self._units(model)
        self.shard_units = _unit_facts(model, self.units, rule=opts.shard, found_by=found_by)
        for unit in self.units:
            fully_shard(unit, **kwargs)
        fully_shard(model, **kwargs)
        # A user's model may return a view (`.squeeze(1)`), and FSDP2 warns in every worker that an
        # in-place op on it would skip a unit's gradient hooks. Whether that happened is what each
        # case's fingerprint checks against single's in every run (dpbench.results.fingerprint):
        # the warning says nothing the run does not verify, so it does not print.
        warnings.filterwarnings(
            "ignore", message=r"FSDP2-wrapped module .* returned a view tensor", category=UserWarning
        )
        self.model = model
        self.forward_module = self.maybe_compile(model)
        self.optimizer = self.make_optimizer(model.parameters())
        self.warm_up_compiled()

    def _units(self, model: Any) -> tuple[list[Any], str]:
        """The modules sharded one by one before the root, and how they were chosen."""
        opts = self.spec.options
        if opts.shard == "model":
            return [], "the whole model"
        if opts.shard == "block":
            names = parse_units(opts.units) or tuple(getattr(self.workload, "blocks", ()) or ())
            blocks, found_by = find_blocks(model, names)
            if blocks:
                return blocks, found_by
        children = [child for child in model.children() if any(True for _ in child.parameters())]
        return children, "top-level children"

    def _policies(self) -> dict[str, Any]:
        import torch
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy

        out: dict[str, Any] = {}
        dtypes = parse_mixed_precision(self.spec.options.mixed_precision)
        if dtypes is not None:
            param, reduce = dtypes
            out["mp_policy"] = MixedPrecisionPolicy(
                param_dtype=getattr(torch, MP_DTYPES[param]),
                reduce_dtype=getattr(torch, MP_DTYPES[reduce]) if reduce else None,
            )
        if self.spec.options.cpu_offload:
            out["offload_policy"] = CPUOffloadPolicy()
        return out

    def train_step(self, inputs: Any, target: Any) -> Any:
        self.optimizer.zero_grad(set_to_none=True)
        with self.phases(Phase.FORWARD), self.autocast():
            x = to_device(inputs, self.device)
            y = to_device(target, self.device)
            loss = self.workload.loss(call_model(self.forward_module, x), y)
        with self.phases(Phase.BACKWARD):
            # FSDP averages gradients over ranks, as DDP does: weight for uneven slices.
            self.precision.backward(loss * self.loss_weight())
        with self.phases(Phase.OPTIMIZER):
            self.precision.step(self.optimizers())
        return loss.detach()

    def module(self) -> Any:
        return self.model

    def full_parameters(self) -> Any:
        from torch.distributed.tensor import DTensor

        for name, p in self.model.named_parameters():
            # With cpu_offload the shard lives in host memory; the all-gather runs on the rank's
            # device (NCCL takes no host tensors). full_tensor() is a collective: every rank
            # calls it, in the same order. One parameter at a time: the caller drops each one.
            local = p.to_local().detach().to(self.device)
            yield (
                name,
                DTensor.from_local(
                    local, p.device_mesh, p.placements, run_check=False, shape=p.shape, stride=p.stride()
                ).full_tensor(),
            )

    def fingerprint_sums(self) -> dict[str, Any]:
        # Each rank adds up the shards it holds and one all-reduce over its replica's ranks adds
        # theirs: the full parameters' sums without a gather per parameter (one collective each,
        # which made the fingerprint cost more than the steps on a small model). Each rank reports
        # its own replica's sums, so HSDP's replica groups are compared in rank_spread (an all-reduce
        # over every rank would average a diverging replica away); without replicate there is one
        # replica and every rank reports its sums.
        import torch
        import torch.distributed as dist

        from dpbench.strategies.fingerprint import sums_record, tensor_sums

        hsdp = self.spec.options.replicate > 1
        group, within = (self.mesh.get_group("shard"), (1,)) if hsdp else (self.ctx.group, (0,))
        sums = torch.zeros(3, dtype=torch.float64, device=self.device)
        count = 0
        for p in self.model.parameters():
            # A parameter replicated across the ranks summed (not FSDP's own placement) counts once.
            copies = math.prod(p.device_mesh.size(d) for d in within if p.placements[d].is_replicate())
            sums += tensor_sums(p.to_local()).to(self.device) / copies
            count += p.numel()  # a DTensor's numel is the full parameter's
        dist.all_reduce(sums, group=group)
        return sums_record(sums, count)

    # -- case metrics ------------------------------------------------------------------------
    def compute_dtype(self) -> str:
        dtypes = parse_mixed_precision(self.spec.options.mixed_precision)
        if dtypes is not None and self.spec.options.precision == "fp32":
            return dtypes[0]  # FSDP casts the gathered parameters: the matmuls run in this dtype
        return super().compute_dtype()

    def twin_module(self, model: Any) -> Any:
        dtypes = parse_mixed_precision(self.spec.options.mixed_precision)
        if dtypes is None or dtypes[0] == "fp32":
            return model
        import torch

        from dpbench.strategies._cast import CastInputs

        return CastInputs(model, getattr(torch, MP_DTYPES[dtypes[0]]))

    def compute_only_share(self, twin: Any) -> list[Any]:
        """This rank's shards (same shapes, dtype and device, e.g. host memory with cpu_offload)."""
        import torch

        share = []
        for p in self.model.parameters():
            local = torch.zeros_like(p.to_local(), requires_grad=True)
            local.grad = torch.zeros_like(local)
            share.append(local)
        return share

    def collective_groups(self) -> dict[str, tuple[Any, int]]:
        """HSDP's subgroups for the collective replay: this rank's shard group and replicate group."""
        if self.spec.options.replicate == 1:
            return {}
        return {name: (self.mesh.get_group(name), self.mesh.size(i)) for i, name in enumerate(("replicate", "shard"))}

    def collective_plan(self) -> list[Any]:
        """Per unit: an all-gather in forward (again in backward when it reshards), a reduce-scatter in
        backward; HSDP: those within the shard group, then an all-reduce of the shard across groups."""
        from dpbench.strategies.profiling import Collective

        replicate = self.spec.options.replicate
        world = self.spec.world_size // replicate
        within = "world" if replicate == 1 else "shard"
        dtypes = parse_mixed_precision(self.spec.options.mixed_precision)
        claimed: set[int] = set()
        groups = []
        for unit in self.units:
            params = list(unit.parameters())
            claimed.update(id(p) for p in params)
            groups.append((params, True))
        groups.append(([p for p in self.model.parameters() if id(p) not in claimed], False))  # the root
        plan = []
        for params, reshards in groups:
            if not params:
                continue
            padded = sum(
                math.ceil((p.shape[0] if p.dim() else 1) / world) * world * (p[0].numel() if p.dim() else 1)
                for p in params
            )
            own = str(params[0].dtype).replace("torch.", "")
            gather = MP_DTYPES[dtypes[0]] if dtypes else own
            reduce = MP_DTYPES[dtypes[1]] if dtypes and dtypes[1] else gather
            gathers = 2 if reshards and gathers_in_backward(self.spec.options.reshard_after_forward) else 1
            plan += [Collective(op="all_gather", numel=padded, dtype=gather, group=within)] * gathers
            plan.append(Collective(op="reduce_scatter", numel=padded, dtype=reduce, group=within))
            if replicate > 1:
                plan.append(Collective(op="all_reduce", numel=padded // world, dtype=reduce, group="replicate"))
        return plan


def gathers_in_backward(reshard_after_forward: bool | int) -> bool:
    """Whether backward gathers a unit again: unless it kept its parameters after forward (False, or
    a group of 1 rank)."""
    reshard = reshard_after_forward
    # True is an int and `True != 1` is False in Python: True (reshard to every rank) is tested first.
    return reshard is True or (isinstance(reshard, int) and not isinstance(reshard, bool) and reshard != 1)


def _unit_facts(model: Any, units: list[Any], *, rule: str, found_by: str) -> dict[str, Any]:
    """What ``extra_info`` records of the FSDP units: the rule, how the units were found, their count
    (the root included), their classes and the bytes of the largest (the root's own parameters count
    as a unit)."""
    claimed: set[int] = set()
    sizes = []
    for unit in units:
        params = [p for p in unit.parameters() if id(p) not in claimed]
        claimed.update(id(p) for p in params)
        sizes.append(sum(p.numel() * p.element_size() for p in params))
    sizes.append(sum(p.numel() * p.element_size() for p in model.parameters() if id(p) not in claimed))
    return {
        "rule": rule,
        "found_by": found_by,
        "count": len(units) + 1,
        "classes": sorted({type(u).__name__ for u in units}),
        "largest_unit_bytes": max(sizes),
    }
