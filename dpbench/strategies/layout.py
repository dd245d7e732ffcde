"""A model's parameters as a step sends them: each trainable parameter's bytes in the order they
are defined (the forward's; backward makes their gradients ready in the reverse order), the
bytes of its buffers, and its FSDP units (one per block, the root last) — what the step model
(:mod:`dpbench.predict`) cuts into buckets or units. :func:`meta_layout` reads them from a
workload spec built on the meta device (nothing allocated); :class:`ParameterLayout` itself is
torch-free, so a layout can also be stated (a parameter count, a published layer order)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ParameterLayout", "meta_layout"]


@dataclass(kw_only=True, frozen=True)
class ParameterLayout:
    """What one model's step sends, whatever measured it."""

    sizes: tuple[int, ...]
    """Bytes of each trainable parameter, in the order the model defines them (the forward's)."""
    buffer_bytes: int = 0
    """Bytes of the model's buffers (BatchNorm statistics): what a buffer broadcast sends."""
    unit_sizes: tuple[int, ...] = ()
    """Bytes of each FSDP unit in forward order, the root (what no block holds) last; empty: one unit."""
    origin: str = ""
    """Where it came from: the spec built on the meta device, or what was stated."""

    @property
    def param_bytes(self) -> int:
        """Every trainable parameter's bytes."""
        return sum(self.sizes)


def meta_layout(spec: str, *, element_size: int = 4) -> ParameterLayout:
    """The layout of workload ``spec`` built on the meta device (its blocks found as FSDP's units
    are: :func:`dpbench.strategies.blocks.find_blocks`); a ValueError in one line where it cannot
    be built. Parameters count ``element_size`` bytes each (fp32: precision is autocast)."""
    from dpbench.strategies.blocks import find_blocks
    from dpbench.strategies.estimate import EstimateError, Estimator

    try:
        estimator = Estimator(spec, activations=False)
    except (EstimateError, ValueError, TypeError) as exc:
        raise ValueError(str(exc).splitlines()[0]) from None
    model = estimator._meta  # the estimator's own meta copy: built once
    params = [p for p in model.parameters() if p.requires_grad]
    sizes = tuple(p.numel() * element_size for p in params)
    blocks, _ = find_blocks(model)
    units: dict[int, int] = {}
    owner = {id(p): i for i, block in enumerate(blocks) for p in block.parameters()}
    root = 0
    for p, nbytes in zip(params, sizes):
        i = owner.get(id(p))
        if i is None:
            root += nbytes
        else:
            units[i] = units.get(i, 0) + nbytes
    unit_sizes = tuple(units[i] for i in sorted(units)) + ((root,) if root else ())
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    return ParameterLayout(
        sizes=sizes,
        buffer_bytes=int(buffers),
        unit_sizes=unit_sizes,
        origin=f"{spec} built on the meta device ({sum(p.numel() for p in params):,} parameters)",
    )
