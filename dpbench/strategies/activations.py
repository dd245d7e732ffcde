"""The activation peak of one forward + backward, counted without allocating it.

:class:`LiveBytes` counts the bytes of every tensor storage the operations inside it create, and
frees them when the storage dies: its ``peak`` is the most that was alive at once. Under
``FakeTensorMode`` nothing is allocated (a fake tensor has shapes, dtypes and a meta storage),
so :func:`fake_step_peak` gives the peak of a step far larger than this machine's memory; on
real tensors (:func:`real_step_peak`) the same counter measures the step it runs, which is what
the estimate is validated against.

Private torch API, and why: ``torch.utils._python_dispatch.TorchDispatchMode`` (the hook that
sees every operation, forward and backward, with its outputs; ``FlopCounterMode`` and
``torch.distributed._tools.mem_tracker`` are built on it) and
``torch._subclasses.fake_tensor.FakeTensorMode`` (tensors with shapes and no memory; the meta
device alone would ignore CPU autocast, which the case's precision needs). No public API counts
live tensors on a CPU, and ``mem_tracker``'s ``MemTracker`` needs a CUDA or meta device.
"""

from __future__ import annotations

import weakref
from typing import Any

__all__ = ["LiveBytes", "step_peak", "fake_step_peak", "real_step_peak"]


class _Mode:
    """Import-time-free holder: ``torch`` is imported on first use (the parent CLI stays light)."""

    cls: Any = None


def _live_bytes_class() -> Any:
    if _Mode.cls is not None:
        return _Mode.cls
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class LiveBytesMode(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.live = 0
            self.peak = 0
            self._storages: set[int] = set()

        def _free(self, key: int, nbytes: int) -> None:
            self._storages.discard(key)
            self.live -= nbytes

        def _track(self, tensor: Any) -> None:
            storage = tensor.untyped_storage()
            key = storage._cdata  # the StorageImpl's address: views and in-place results share it
            if key in self._storages:
                return
            nbytes = storage.nbytes()
            self._storages.add(key)
            self.live += nbytes
            self.peak = max(self.peak, self.live)
            weakref.finalize(storage, self._free, key, nbytes)

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            # A view or in-place result of a tensor made before the mode (a parameter, the
            # batch) shares its storage: it allocates nothing, so it is not counted.
            given = {t.untyped_storage()._cdata for t in _tensors(args, kwargs.values() if kwargs else ())}
            for item in _tensors((out,)):
                if item.untyped_storage()._cdata not in given:
                    self._track(item)
            return out

    def _tensors(*groups: Any) -> Any:
        # Operations take and return tensors, lists of them or plain values: a flat walk, no
        # pytree (it would cost more than the fake operation it counts).
        for group in groups:
            for item in group:
                if isinstance(item, torch.Tensor):
                    yield item
                elif isinstance(item, (list, tuple)):
                    yield from (t for t in item if isinstance(t, torch.Tensor))

    _Mode.cls = LiveBytesMode
    return LiveBytesMode


def LiveBytes() -> Any:  # noqa: N802 - a factory standing for the class (defined on first use)
    """A ``TorchDispatchMode`` whose ``peak`` is the most bytes its operations' storages held at once."""
    return _live_bytes_class()()


def step_peak(model: Any, inputs: Any, target: Any, loss_fn: Any, *, precision: str, device_type: str) -> int:
    """Peak bytes of one forward + backward of ``model`` (its gradients included, built in backward)."""
    import contextlib

    import torch

    from dpbench.strategies.base import call_model

    for p in model.parameters():
        p.grad = None
    dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    autocast = torch.autocast(device_type, dtype=dtype) if dtype is not None else contextlib.nullcontext()
    with LiveBytes() as tracker:
        with autocast:
            loss = loss_fn(call_model(model, inputs), target)
        loss.backward()
        del loss
    return int(tracker.peak)


class FakeStep:
    """One fake model, reused for the peak at several batch sizes (a step of a 1B model takes well under a second)."""

    def __init__(self, workload: Any, *, seed: int = 0, checkpoint: bool = False) -> None:
        import torch
        from torch._subclasses.fake_tensor import FakeTensorMode

        self.workload = workload
        self.seed = seed
        self.mode = FakeTensorMode(allow_non_fake_inputs=True)
        try:
            with self.mode:
                torch.manual_seed(seed)
                self.model = workload.model()
        except Exception as fake_error:
            # An __init__ that reads a value it computed cannot run on fake tensors (transformers'
            # ConvNeXt: drop-path rates from torch.linspace(...).tolist(); ViT: trunc_normal_ init),
            # but it runs on the meta device, whose model then gets fake storage of the same shapes.
            try:
                torch.manual_seed(seed)
                with torch.device("meta"):
                    model = workload.model()
            except Exception:
                raise fake_error from None
            with self.mode:
                self.model = model.to_empty(device="cpu")
        if checkpoint:  # what a checkpointed run keeps: each block recomputed in backward
            from dpbench.strategies.checkpointing import checkpoint_blocks

            checkpoint_blocks(self.model, getattr(workload, "blocks", ()))

    def peak(self, batch: int, *, precision: str) -> int:
        from torch.utils._pytree import tree_map

        inputs, target = self.workload.batch(0, batch, self.seed)  # real and small: token ids, images

        def fake(x: Any) -> Any:
            import torch

            return self.mode.from_tensor(x) if isinstance(x, torch.Tensor) else x

        inputs, target = tree_map(fake, inputs), tree_map(fake, target)
        with self.mode:
            return step_peak(self.model, inputs, target, self.workload.loss, precision=precision, device_type="cpu")


def fake_step_peak(
    workload: Any, batch: int, *, precision: str = "fp32", seed: int = 0, checkpoint: bool = False
) -> int:
    """:func:`step_peak` of ``workload`` at ``batch`` samples, under ``FakeTensorMode`` (nothing allocated)."""
    return FakeStep(workload, seed=seed, checkpoint=checkpoint).peak(batch, precision=precision)


def real_step_peak(
    workload: Any, batch: int, *, precision: str = "fp32", seed: int = 0, checkpoint: bool = False
) -> int:
    """:func:`step_peak` on real CPU tensors: the measurement :func:`fake_step_peak` is checked against."""
    import torch

    torch.manual_seed(seed)
    model = workload.model()
    if checkpoint:
        from dpbench.strategies.checkpointing import checkpoint_blocks

        checkpoint_blocks(model, getattr(workload, "blocks", ()))
    inputs, target = workload.batch(0, batch, seed)
    return step_peak(model, inputs, target, workload.loss, precision=precision, device_type="cpu")
