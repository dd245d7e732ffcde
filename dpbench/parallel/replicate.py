"""Replicate a module onto devices so every replica's gradient flows back into the original.

Parameters go through :class:`Broadcast` (one autograd node for all of them): one copy per
distinct device, and the source device gets differentiable views of the originals, so
replica 0 shares storage with the module and no copy is made for replicas on the source
device. Replicas on the same device share the parameters (forward only reads them).
Buffers are different: forward updates them in place (BatchNorm running stats), so replica 0
keeps the original buffers (updates are recorded, as torch guarantees) and every other
replica gets its own copy (updates are lost, and replicas on one device cannot race).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import torch
from torch import nn

from ._devices import DeviceLike, parse_devices
from ._functions import Broadcast

__all__ = ["replicate"]

T = TypeVar("T", bound=nn.Module)


def _copy_per_device(
    tensors: list[torch.Tensor], devices: list[torch.device], detach: bool
) -> dict[torch.device, list[torch.Tensor]]:
    """``{device: [copy of each tensor]}`` for the distinct ``devices``; differentiable unless ``detach``."""
    unique = list(dict.fromkeys(devices))
    if not tensors:
        return {d: [] for d in unique}
    if detach:
        return {d: [t.detach() if t.device == d else t.detach().to(d, copy=True) for t in tensors] for d in unique}
    flat = Broadcast.apply(unique, *tensors)
    n = len(tensors)
    return {d: list(flat[k * n : (k + 1) * n]) for k, d in enumerate(unique)}


def _check_replicable(network: nn.Module) -> None:
    for name, module in network.named_modules():
        if isinstance(module, torch.jit.ScriptModule):
            raise TypeError(
                f"network: cannot replicate ScriptModule {name or '<root>'!r}; pass the eager nn.Module instead"
            )
        for pname, p in module.named_parameters(recurse=False):
            if isinstance(p, nn.parameter.UninitializedParameter):
                # RuntimeError and the opening sentence are torch's (LazyModuleMixin), so code
                # that handles torch's DataParallel error handles this one too.
                raise RuntimeError(
                    "Modules with uninitialized parameters can't be used with `DataParallel`. "
                    f"network: parameter {name + '.' if name else ''}{pname} is uninitialized (a lazy module); "
                    "run a dummy forward pass to initialize it before replicating"
                )


def replicate(network: T, devices: Sequence[DeviceLike], detach: bool = False) -> list[T]:
    """One replica of ``network`` per entry of ``devices`` (repeats allowed: several replicas per device).

    With ``detach=False`` the replicas' parameters are differentiable copies/views of the
    originals and backward sums their gradients into ``network``'s ``.grad``; with
    ``detach=True`` (what DataParallel uses under ``no_grad``) they are plain tensors.
    """
    if not devices:
        return []
    devs = parse_devices(devices, argument="devices")
    _check_replicable(network)
    num = len(devs)

    params = list(network.parameters())
    param_index = {p: i for i, p in enumerate(params)}
    param_copies = _copy_per_device(params, devs, detach)

    buffers = list(network.buffers())
    # Buffers that require grad (rare) stay differentiable, as in torch; the rest are copied plainly.
    grad_buffers = [b for b in buffers if b.requires_grad and not detach]
    grad_buffer_copies = _copy_per_device(grad_buffers, devs, detach=False) if grad_buffers else {}
    grad_buffer_pos = {b: i for i, b in enumerate(grad_buffers)}

    def buffer_for(buf: torch.Tensor, j: int) -> torch.Tensor:
        device = devs[j]
        if buf in grad_buffer_pos:
            return grad_buffer_copies[device][grad_buffer_pos[buf]]
        if j == 0 and buf.device == device:
            return buf  # shared: in-place updates in replica 0 land in the original
        return buf.detach().to(device, copy=True)

    modules = list(network.modules())
    module_index = {m: i for i, m in enumerate(modules)}
    # _replicate_for_data_parallel is the per-class hook torch's own replicate calls (RNNBase
    # and others override it), so going through it keeps those modules working.
    copies = [[m._replicate_for_data_parallel() for m in modules] for _ in range(num)]

    for i, module in enumerate(modules):
        for key, child in module._modules.items():
            for j in range(num):
                if child is None:
                    copies[j][i]._modules[key] = None
                else:
                    setattr(copies[j][i], key, copies[j][module_index[child]])
        for key, param in module._parameters.items():
            for j in range(num):
                if param is None:
                    copies[j][i]._parameters[key] = None
                else:
                    # A non-leaf tensor cannot be a Parameter: set it as a plain attribute.
                    setattr(copies[j][i], key, param_copies[devs[j]][param_index[param]])
        for key, buf in module._buffers.items():
            for j in range(num):
                if buf is None:
                    copies[j][i]._buffers[key] = None
                else:
                    setattr(copies[j][i], key, buffer_for(buf, j))
    return [replica[0] for replica in copies]  # type: ignore[misc]
