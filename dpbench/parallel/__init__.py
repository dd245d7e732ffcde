"""dpbench.parallel: torch.nn.parallel's DataParallel pipeline, rebuilt to also run on CPU.

Same names, signatures and argument order as ``torch.nn.parallel``; devices may be CUDA
indices, ``"cuda:N"``, ``"cpu"`` or ``torch.device``, and may repeat (several replicas on
one device). See ``DataParallel`` for the keyword-only extras.

May import: torch and ``dpbench.schema`` only: it is the bottom layer, usable on its own.
"""

from .data_parallel import DataParallel, data_parallel
from .parallel_apply import ReplicaThreads, parallel_apply
from .replicate import replicate
from .scatter_gather import GATHER_LAYOUTS, gather, scatter, scatter_kwargs

__all__ = [
    "DataParallel",
    "data_parallel",
    "scatter",
    "scatter_kwargs",
    "gather",
    "replicate",
    "parallel_apply",
    "ReplicaThreads",
    "GATHER_LAYOUTS",
]
