"""dict_model: its loss is the global-batch mean whether the output is one module's or a gather of replicas'."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dpbench.workloads import get_workload
from dpbench.workloads.dict_model import dict_output_loss


def _gather_like_data_parallel(outputs: list[dict]) -> dict:
    """What DataParallel's gather makes of per-replica dicts: tensors concatenated along dim 0,
    0-dim tensors (per-replica scalars) stacked into a vector with one entry per replica."""

    def gather(values):
        first = values[0]
        if isinstance(first, dict):
            return {k: gather([v[k] for v in values]) for k in first}
        return torch.stack(values) if first.dim() == 0 else torch.cat(values)

    return gather(outputs)


@pytest.fixture
def model_and_batch():
    workload = get_workload("dict_model")
    torch.manual_seed(0)
    model = workload.model()
    (x, y), target = workload.batch(0, 64, 0)
    return workload, model, x, y, target


def test_output_structure(model_and_batch):
    _, model, x, y, _ = model_and_batch
    output = model(x, y)
    assert set(output) == {"loss", "logits", "monitors"}
    assert output["loss"].dim() == 0 and output["logits"].shape == (64, 10)
    assert set(output["monitors"]) == {"accuracy", "error"}
    accuracy = (output["logits"].argmax(1) == y).float().mean()
    assert torch.equal(output["monitors"]["accuracy"], accuracy)


def test_single_module_loss_is_the_models_own_loss(model_and_batch):
    workload, model, x, y, target = model_and_batch
    output = model(x, y)
    assert torch.allclose(workload.loss(output, target), output["loss"], rtol=0, atol=1e-6)


@pytest.mark.parametrize("replicas", [2, 3, 5])
def test_gathered_replica_outputs_give_the_global_batch_loss_and_gradient(model_and_batch, replicas):
    workload, model, x, y, target = model_and_batch
    single_loss = workload.loss(model(x, y), target)
    single_grads = torch.autograd.grad(single_loss, list(model.parameters()))

    # 64 samples on 3 or 5 replicas split unevenly (22/21/21, 13/13/13/13/12), as scatter does.
    outputs = [model(xs, ys) for xs, ys in zip(torch.tensor_split(x, replicas), torch.tensor_split(y, replicas))]
    gathered = _gather_like_data_parallel(outputs)
    assert gathered["loss"].shape == (replicas,) and gathered["logits"].shape == (64, 10)
    replica_loss = workload.loss(gathered, target)
    assert torch.allclose(replica_loss, single_loss, rtol=0, atol=1e-6)
    assert torch.allclose(replica_loss, F.cross_entropy(gathered["logits"], target), rtol=0, atol=0)
    replica_grads = torch.autograd.grad(replica_loss, list(model.parameters()))
    for a, b in zip(single_grads, replica_grads):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-7)
    if 64 % replicas:
        # Why the loss is recomputed: the plain mean of per-replica means is biased when the
        # split is uneven, so it is not the number `single` computes.
        assert not torch.allclose(gathered["loss"].mean(), single_loss, rtol=0, atol=1e-7)


def test_loss_rejects_outputs_without_logits():
    target = torch.zeros(4, dtype=torch.int64)
    with pytest.raises(TypeError, match="output dict with a 'logits' entry, got Tensor"):
        dict_output_loss(torch.zeros(4, 10), target)
    with pytest.raises(TypeError, match=r"got \['loss'\]"):
        dict_output_loss({"loss": torch.tensor(1.0)}, target)
    with pytest.raises(ValueError, match=r"batch = len\(target\) = 4, got \(3, 10\)"):
        dict_output_loss({"logits": torch.zeros(3, 10)}, target)
