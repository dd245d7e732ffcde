"""The model's fingerprint, worker side: float64 sums of the full parameters, the same under every strategy.

Every strategy trains the same model from the same initial weights on the same global batches,
so after the same steps its parameters must equal ``single``'s within float rounding. The
fingerprint that proves it in every run has to be computed *the same way* under every strategy,
whatever each one holds: the same float64 Σp, Σ|p| and Σp² over every element of every full
parameter. :meth:`dpbench.strategies.Strategy.fingerprint_sums` reduces the parameters a rank holds
whole (:func:`parameter_sums`); fsdp adds up the shards of its replica with one all-reduce over the
replica's ranks instead of gathering them (the same sums, added in another order; under HSDP each
replica group's own, so the ranks' spread compares the replica groups). :func:`tensor_sums` reduces chunk by chunk
and adds the chunks' sums in float64, so no float64 copy of a large parameter is ever held (a CPU
worker's measured peak is its lifetime's).

A stateful model is not expected to match: BatchNorm normalises each replica's slice with that
slice's own statistics, and dropout draws a different mask per replica. :func:`stateful_reason`
says which of them the model has, for the record that exempts it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["CHUNK_ELEMENTS", "parameter_sums", "stateful_reason", "sums_record", "tensor_sums"]

# Elements reduced at a time: a chunk's temporaries (|t|, t²) are 256 KiB in fp32, too little to move
# a CPU worker's resident peak, and few enough chunks that a large model's sums take milliseconds.
CHUNK_ELEMENTS = 1 << 16


def tensor_sums(tensor: Any) -> Any:
    """``[Σ t, Σ |t|, Σ t²]`` over every element of ``tensor``, a float64 tensor on its device.

    Chunk by chunk: each chunk of :data:`CHUNK_ELEMENTS` is reduced in the tensor's own precision
    (fp32, or fp32 for a half-precision tensor; torch's pairwise summation, error ~1e-7 of the chunk's
    magnitudes, far below any tolerance a comparison applies) and the chunks' sums are added in
    float64: three times faster than converting every element to float64. No float64 copy of the
    tensor is made, and nothing syncs with the host until the caller reads the result."""
    import torch

    out = torch.zeros(3, dtype=torch.float64, device=tensor.device)
    for chunk in tensor.detach().reshape(-1).split(CHUNK_ELEMENTS):
        wide = chunk if chunk.dtype in (torch.float32, torch.float64) else chunk.float()
        out += torch.stack([wide.sum(), wide.abs().sum(), wide.square().sum()]).to(torch.float64)
    return out


def sums_record(sums: Any, count: int) -> dict[str, Any]:
    """The fingerprint's fields from ``[Σ p, Σ |p|, Σ p²]`` (:func:`tensor_sums` added up) and the
    number of elements they cover."""
    total, absolute, squares = (float(v) for v in sums.cpu().tolist())
    return {"param_sum": total, "param_abs_sum": absolute, "param_sq_sum": squares, "param_count": int(count)}


def parameter_sums(named: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """``param_sum`` (Σ p), ``param_abs_sum`` (Σ |p|, the scale a difference of sums is read against),
    ``param_sq_sum`` (Σ p²) over every element of every tensor in ``named`` (:func:`tensor_sums`), and
    ``param_count`` (elements), in the order given."""
    import torch

    total = torch.zeros(3, dtype=torch.float64)
    count = 0
    for _, tensor in named:
        total += tensor_sums(tensor).cpu()
        count += tensor.numel()
    return sums_record(total, count)


def stateful_reason(module: Any, *, stateful: bool) -> str | None:
    """Why ``module`` (a workload marked ``stateful``) is not expected to match ``single``; None when
    the workload is not marked stateful. Names the BatchNorm and active dropout layers it finds."""
    if not stateful:
        return None
    from torch import nn

    norms = {
        type(m).__name__ for m in module.modules() if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d))
    }
    drops = {
        type(m).__name__
        for m in module.modules()
        if isinstance(m, (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout)) and m.p > 0
    }
    parts = []
    if norms:
        parts.append(f"BatchNorm ({', '.join(sorted(norms))}) normalises each replica's slice with its own statistics")
    if drops:
        parts.append(f"dropout ({', '.join(sorted(drops))}) draws a different mask on each replica")
    if not parts:
        parts.append("the workload is marked stateful: its forward is stochastic or keeps per-replica state")
    return "; ".join(parts) + ", so its configurations are not expected to match single"
