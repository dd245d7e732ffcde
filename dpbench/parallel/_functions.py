"""Autograd Functions for the replicate step.

torch's ``Broadcast`` refuses CPU tensors ("Broadcast function not implemented for CPU
tensors"); ours copies with ``Tensor.to`` so it works on CPU, between GPUs and for targets
equal to the source. Scatter and gather need no Function of their own: they are built from
differentiable ops (``narrow``, ``to``, ``cat``/``stack``), which autograd already handles on
every device and to any order (see ``scatter_gather.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.cuda.comm  # public home of broadcast_coalesced; importable on CPU builds too
from torch.autograd import Function

__all__ = ["Broadcast"]


def _coalesced_cuda_copies(
    devices: Sequence[torch.device], tensors: Sequence[torch.Tensor]
) -> dict[torch.device, tuple]:
    """Copies of ``tensors`` on the other GPUs, made with torch.cuda.comm.broadcast_coalesced.

    Between GPUs, copying small parameters one by one costs a kernel launch each; the
    documented ``broadcast_coalesced`` packs them into a few buffers, as torch's DataParallel
    does. Used only where it applies as documented: every tensor on one GPU (the source, which
    must be listed first), real dtypes, and distinct CUDA targets; otherwise ``{}``.
    """
    if not tensors:
        return {}
    source = tensors[0].device
    targets = [d for d in dict.fromkeys(devices) if d != source]
    if (
        source.type != "cuda"
        or not targets
        or any(d.type != "cuda" for d in targets)
        or any(t.device != source or t.is_complex() for t in tensors)
    ):
        return {}
    copies = torch.cuda.comm.broadcast_coalesced(list(tensors), [source, *targets])
    # copies[0] is the source itself; the originals are used there directly (see forward).
    return {d: tuple(c) for d, c in zip(targets, copies[1:])}


class Broadcast(Function):
    """``Broadcast.apply(devices, *tensors)`` → one copy of every tensor per target device.

    Output ``k * len(tensors) + i`` is tensor ``i`` on ``devices[k]``. A target equal to the
    tensor's own device gets the tensor itself back, which autograd turns into a view: it
    shares storage with the original (torch's guarantee for replica 0) and costs no copy.
    Backward sums the gradients of all copies onto each tensor's device, which is how every
    replica's gradient ends up in the original parameter's ``.grad``; a tensor that requires
    grad but that no replica used gets zeros, as under torch's Broadcast.
    """

    @staticmethod
    def forward(ctx, devices: Sequence[torch.device], *tensors: torch.Tensor):  # type: ignore[override]
        # Replicas that do not use a parameter produce no gradient for it: skip them in
        # backward instead of materialising zeros per replica (backward adds one zero tensor
        # per input only where no replica produced a gradient at all).
        ctx.set_materialize_grads(False)
        ctx.num_tensors = len(tensors)
        ctx.sources = [(t.shape, t.dtype, t.device) for t in tensors]
        coalesced = _coalesced_cuda_copies(devices, tensors)
        outputs = []
        for device in devices:
            for i, t in enumerate(tensors):
                if t.device == device:
                    outputs.append(t)
                elif device in coalesced:
                    outputs.append(coalesced[device][i])
                else:
                    outputs.append(t.to(device, copy=True))
        # Copies of tensors that do not require grad must not require grad either (buffers).
        frozen = [
            outputs[k * len(tensors) + i]
            for k in range(len(devices))
            for i, needs in enumerate(ctx.needs_input_grad[1:])
            if not needs
        ]
        ctx.mark_non_differentiable(*frozen)
        return tuple(outputs)

    @staticmethod
    def backward(ctx, *grads: torch.Tensor | None):  # type: ignore[override]
        n = ctx.num_tensors
        summed: list[torch.Tensor | None] = []
        for i, (shape, dtype, device) in enumerate(ctx.sources):
            total = None
            # Plain differentiable ops (to, +) keep double backward working.
            for g in grads[i::n]:
                if g is None:
                    continue
                g = g.to(device)
                total = g if total is None else total + g
            if total is None and ctx.needs_input_grad[i + 1]:
                # torch's Broadcast reduces materialised zeros, so a parameter no replica used
                # still gets a zero .grad (not None): weight decay and momentum then apply to
                # it, and optimizers step the same parameters as under torch.nn.DataParallel.
                total = torch.zeros(shape, dtype=dtype, device=device)
            summed.append(total)
        return (None, *summed)
