"""``dict_model``: a classifier whose forward returns a dict, like jactorch's DictGatherDataParallel models.

``forward(x, y)`` returns ``{"loss": scalar, "logits": [B, 10], "monitors": {"accuracy": scalar,
"error": scalar}}``. Its inputs are the tuple ``(x, y)`` (passed positionally), its target ``y``.

Why the workload loss recomputes the cross-entropy from ``output["logits"]`` instead of using
``output["loss"]``: under DataParallel the per-replica outputs are gathered, so the ``"loss"``
entry becomes a vector with one *per-replica mean* per replica (torch's gather turns 0-dim
tensors into a vector). Averaging that vector is the global-batch mean only when every replica
got the same number of samples; with an uneven split (global batch 64 on 3 replicas: 22/21/21)
it is biased. The gathered ``"logits"`` are the whole batch's logits in order, so
``cross_entropy(logits, target)`` is exactly the global-batch mean loss whether the output came
from one module or from a gather — the same number ``single`` computes.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from dpbench.workloads._checks import positive_int
from dpbench.workloads._variants import variant
from dpbench.workloads.base import Workload
from dpbench.workloads.data import IMAGE_SHAPE, NUM_CLASSES, image_batch_factory

__all__ = ["DictClassifier", "dict_output_loss", "dict_model_workload"]


class DictClassifier(nn.Module):
    """Flatten → Linear(784, hidden) → ReLU → Linear(hidden, 10), reporting loss and monitors in a dict."""

    def __init__(self, *, hidden: int = 256, num_classes: int = NUM_CLASSES) -> None:
        super().__init__()
        hidden = positive_int("hidden", hidden)
        num_classes = positive_int("num_classes", num_classes)
        in_features = IMAGE_SHAPE[0] * IMAGE_SHAPE[1] * IMAGE_SHAPE[2]
        self.net = nn.Sequential(
            nn.Flatten(), nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, num_classes)
        )

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, Any]:
        logits = self.net(x)
        loss = F.cross_entropy(logits, y)
        # Monitors are for logging only: no gradient flows through them.
        with torch.no_grad():
            accuracy = (logits.argmax(dim=1) == y).float().mean()
        return {"loss": loss, "logits": logits, "monitors": {"accuracy": accuracy, "error": 1.0 - accuracy}}


def dict_output_loss(output: Mapping[str, Any], target: torch.Tensor) -> torch.Tensor:
    """Global-batch mean cross-entropy, recomputed from ``output["logits"]`` (see the module docstring)."""
    if not isinstance(output, Mapping) or "logits" not in output:
        found = sorted(output) if isinstance(output, Mapping) else type(output).__name__
        raise TypeError(f"dict_output_loss expects the model's output dict with a 'logits' entry, got {found}")
    logits = output["logits"]
    if logits.dim() != 2 or logits.shape[0] != target.shape[0]:
        raise ValueError(
            f"output['logits'] must be [batch, classes] with batch = len(target) = {target.shape[0]}, "
            f"got {tuple(logits.shape)}"
        )
    return F.cross_entropy(logits, target)


def dict_model_workload(*, hidden: int = 256, noise: float = 0.5) -> Workload:
    """``DictClassifier`` on synthetic images; inputs ``(x, y)``, loss recomputed from the logits."""
    hidden = positive_int("hidden", hidden)
    batch = image_batch_factory(noise=noise, dict_inputs=True)
    name, params = variant("dict_model", dict_model_workload, hidden=hidden, noise=batch.keywords["noise"])
    return Workload(
        model=partial(DictClassifier, hidden=hidden),
        batch=batch,
        loss=dict_output_loss,
        name=name,
        params=params,
        description=(
            f"classifier (784→{hidden}→10) whose forward(x, y) returns {{'loss', 'logits', 'monitors'}}; "
            "workload loss = cross-entropy recomputed from the gathered logits (exact global-batch mean)"
        ),
        tags=("image", "classification", "dict-output", "tuple-inputs"),
    )
