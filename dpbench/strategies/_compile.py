"""The ``compile`` option: ``torch.compile`` outside every timed region, its time reported.

``torch.compile`` compiles lazily, at the first call, so :func:`warm_up` runs one full step on
step 0's batch, staged on the device as a timed step's is (forward and backward graphs get built,
under DDP split at bucket boundaries by DDPOptimizer) and then restores parameters, buffers,
optimizer and loss-scaler state: training continues exactly as if the step had not run. Its wall
time (plus wrapping) is ``compile_time_s``.

A cold compile is the longest untimed work a worker does, and it runs inside a call the parent
watches: :data:`COMPILE_TIMEOUT_S` is how long it may take (the worker beats meanwhile) and how
long a rank that compiled first may wait for the others in a collective.
"""

from __future__ import annotations

import copy
import time
from typing import Any

__all__ = ["COMPILE_TIMEOUT_S", "compile_module", "warm_up"]

# Seconds one cold compile may take before its rank counts as hung. Inductor and Triton build
# every kernel of the forward and the backward from nothing (no cache in a fresh image): a
# transformer or hf:gpt2 can take minutes where a small model takes 20-60 s, ranks sharing a
# machine build theirs at once on the same cores, and DDPOptimizer compiles one graph per bucket.
# Ten times the 60 s a rank may otherwise stay silent; a compile past it is hung, not slow.
COMPILE_TIMEOUT_S = 600.0


def compile_module(module: Any) -> tuple[Any, float]:
    import torch

    start = time.perf_counter()
    compiled = torch.compile(module)  # lazy: the graphs are built at the first call
    return compiled, time.perf_counter() - start


def warm_up(trainer: Any) -> float:
    """Seconds of one compiling step of ``trainer`` whose effects are then undone."""
    import torch

    module = trainer.module()
    tensors = list(module.parameters()) + list(module.buffers())
    saved = [t.detach().clone() for t in tensors]
    optimizer_states = [copy.deepcopy(o.state_dict()) for o in trainer.optimizers()]
    scaler_state = copy.deepcopy(trainer.precision.state_dict())
    inputs, target = trainer.staged_batch(0)  # as a timed step receives it: on the device
    trainer.phases.sync()
    start = time.perf_counter()
    trainer.train_step(inputs, target)
    trainer.phases.sync()  # the compiled kernels ran: compilation is over
    seconds = time.perf_counter() - start
    with torch.no_grad():
        for tensor, value in zip(tensors, saved):
            tensor.copy_(value)
    for optimizer, state in zip(trainer.optimizers(), optimizer_states):
        optimizer.load_state_dict(state)
        optimizer.zero_grad(set_to_none=True)
    trainer.precision.load_state_dict(scaler_state)
    trainer.phases.clear()
    return seconds
