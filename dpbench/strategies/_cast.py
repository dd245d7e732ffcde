"""CastInputs: a model computing in one dtype, its float inputs cast on the way in.

The compute-only twin of an FSDP model with a ``MixedPrecisionPolicy`` param dtype: FSDP casts
the gathered parameters and (``cast_forward_inputs``) the floating-point inputs to that dtype.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

__all__ = ["CastInputs"]


def _cast_floats(obj: Any, dtype: torch.dtype) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.to(dtype) if obj.is_floating_point() else obj
    if isinstance(obj, (tuple, list)):
        return type(obj)(_cast_floats(item, dtype) for item in obj)
    return obj


class CastInputs(nn.Module):
    def __init__(self, model: nn.Module, dtype: torch.dtype):
        super().__init__()
        self.model = model.to(dtype)
        self.dtype = dtype

    def forward(self, *args: Any) -> Any:
        return self.model(*_cast_floats(args, self.dtype))
