"""The ``precision`` option on the worker side: autocast for the forward, loss scaling for fp16.

``fp32``: nothing. ``bf16``: forward and loss under ``torch.autocast(device, bfloat16)``
(parameters, gradients and optimizer state stay fp32). ``fp16`` (CUDA only, checked in the
parent): autocast to float16 and a ``torch.amp.GradScaler``; sharded strategies pass their own
scaler (FSDP's ``ShardedGradScaler`` agrees on inf/NaN across ranks).

fp16 has one host sync inside the timed step, and it is torch's, not ours: ``GradScaler.step``
reads the found-inf flag with ``.item()`` to decide whether to step the optimizer, so the host
waits there for the backward to finish before it can queue the optimizer's kernels. A user's
fp16 loop pays the same, so it stays in the measurement; ``python -m benchmarks.gradscaler_sync``
(run by ``tools/gpu-check``) measures what it costs against the same step without that read.

A step whose fp16 gradients overflowed is skipped by the scaler (no optimizer update, the scale
backed off): :attr:`Precision.skipped` counts them, from the optimizers' own step post-hooks (torch
calls them only for a step taken), so counting adds no read of a device value to the step.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["Precision"]


class Precision:
    def __init__(self, name: str, device_type: str, *, scaler_factory: Callable[[], Any] | None = None):
        import torch

        self.name = name
        self.device_type = device_type
        self.dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[name]
        self.scaler = None
        if name == "fp16":
            self.scaler = scaler_factory() if scaler_factory is not None else torch.amp.GradScaler(device_type)
        self.skipped = 0
        """Steps whose optimizer update the loss scaler skipped so far (always 0 without a scaler)."""
        self._taken = 0  # optimizer steps taken under the scaler, counted by their post-hooks
        self._watched: weakref.WeakSet[Any] = weakref.WeakSet()

    def autocast(self) -> Any:
        import torch

        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    def backward(self, loss: Any) -> None:
        (loss if self.scaler is None else self.scaler.scale(loss)).backward()

    def step(self, optimizers: Iterable[Any]) -> None:
        """One optimizer step of each optimizer (skipped by the scaler when fp16 gradients overflowed)."""
        if self.scaler is None:
            for optimizer in optimizers:
                optimizer.step()
            return
        optimizers = list(optimizers)
        for optimizer in optimizers:
            if optimizer not in self._watched:
                optimizer.register_step_post_hook(self._count_taken)
                self._watched.add(optimizer)
        taken = self._taken
        for optimizer in optimizers:
            self.scaler.step(optimizer)
        if self._taken - taken < len(optimizers):
            self.skipped += 1
        self.scaler.update()

    def _count_taken(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._taken += 1

    def state_dict(self) -> dict[str, Any] | None:
        return None if self.scaler is None else self.scaler.state_dict()

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if self.scaler is not None and state is not None:
            self.scaler.load_state_dict(state)
