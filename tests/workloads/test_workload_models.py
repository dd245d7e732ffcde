"""Every registered workload: builds, output shape, finite scalar loss, backward, pickling, learning."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from workload_helpers import call_model, sgd_losses

from dpbench.workloads import (
    check_picklable,
    dict_model_workload,
    get_workload,
    lenet_workload,
    list_workloads,
    mlp_workload,
    resnet18_workload,
    transformer_workload,
)


def _logits(output):
    return output["logits"] if isinstance(output, dict) else output


# Expected logits shape for a batch of 3, per registered name: adding a workload means adding it here.
EXPECTED_LOGITS = {
    "mlp": (3, 10),
    "lenet": (3, 10),
    "resnet18": (3, 10),
    "transformer": (3, 64, 512),
    "dict_model": (3, 10),
}


def test_every_registered_workload_has_an_expected_shape():
    assert sorted(EXPECTED_LOGITS) == list_workloads()


@pytest.mark.parametrize("name", sorted(EXPECTED_LOGITS))
@pytest.mark.slow
def test_forward_loss_and_backward(name):
    workload = get_workload(name)
    torch.manual_seed(0)
    model = workload.model()
    assert isinstance(model, torch.nn.Module)
    inputs, target = workload.batch(0, 3, 0)
    output = call_model(model, inputs)
    assert tuple(_logits(output).shape) == EXPECTED_LOGITS[name]
    loss = workload.loss(output, target)
    assert loss.dim() == 0 and torch.isfinite(loss)
    loss.backward()
    # Every parameter takes part in the loss (DDP's default find_unused_parameters=False needs that).
    for param_name, param in model.named_parameters():
        assert param.grad is not None, f"{name}: {param_name} got no gradient"
        assert torch.isfinite(param.grad).all(), f"{name}: {param_name} has a non-finite gradient"
    assert any(p.grad.abs().sum() > 0 for p in model.parameters())


@pytest.mark.parametrize("name", sorted(EXPECTED_LOGITS))
def test_same_seed_builds_the_same_weights(name):
    factory = get_workload(name).model
    torch.manual_seed(11)
    first = factory().state_dict()
    torch.manual_seed(11)
    second = factory().state_dict()
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)


@pytest.mark.parametrize("name", sorted(EXPECTED_LOGITS))
@pytest.mark.slow
def test_forward_is_deterministic_and_stateless_unless_marked_stateful(name):
    workload = get_workload(name)
    assert workload.stateful == (name == "resnet18")  # BatchNorm is the only per-replica state
    torch.manual_seed(0)
    model = workload.model().train()
    inputs, _ = workload.batch(1, 4, 0)
    buffers_before = {k: v.clone() for k, v in model.named_buffers()}
    first = _logits(call_model(model, inputs))
    changed = [k for k, v in model.named_buffers() if not torch.equal(v, buffers_before[k])]
    if workload.stateful:
        # What "stateful" means here: a train-mode forward updates state (BatchNorm running
        # statistics), so replicas that see different slices drift apart.
        assert changed, f"{name} is marked stateful but its forward changed no buffer"
        model.eval()
        assert torch.equal(_logits(call_model(model, inputs)), _logits(call_model(model, inputs)))
    else:
        # No dropout, no state: the same input gives the same output, and no buffer moves.
        assert not changed, f"{name} changed buffers {changed} in forward but is not marked stateful"
        assert torch.equal(first, _logits(call_model(model, inputs)))


@pytest.mark.parametrize("name", sorted(EXPECTED_LOGITS))
@pytest.mark.slow
def test_workload_survives_a_pickle_round_trip(name):
    workload = get_workload(name)
    check_picklable(workload)
    clone = pickle.loads(pickle.dumps(workload))
    assert clone.to_dict() == workload.to_dict() and clone.tags == workload.tags
    inputs, target = workload.batch(5, 4, 2)
    inputs2, target2 = clone.batch(5, 4, 2)
    assert torch.equal(target, target2)
    torch.manual_seed(3)
    original = call_model(workload.model(), inputs)
    torch.manual_seed(3)
    rebuilt = call_model(clone.model(), inputs2)
    assert torch.equal(_logits(original), _logits(rebuilt))
    assert torch.equal(workload.loss(original, target), clone.loss(rebuilt, target2))


# Registered defaults except resnet18, which is replaced by a narrow variant of the same
# structure: the full one costs seconds per step on a small CPU.
LEARNING_CASES = {
    "mlp": (get_workload("mlp"), 30, 16),
    "lenet": (get_workload("lenet"), 30, 16),
    "dict_model": (get_workload("dict_model"), 20, 16),
    "transformer": (get_workload("transformer"), 20, 8),
    "resnet18-narrow": (resnet18_workload(widths=(8, 16, 32, 64)), 12, 16),
}


@pytest.mark.parametrize("case", sorted(LEARNING_CASES))
@pytest.mark.slow
def test_loss_goes_down_under_plain_sgd(case):
    workload, steps, batch = LEARNING_CASES[case]
    losses = sgd_losses(workload, steps=steps, batch=batch, lr=0.1)
    assert all(torch.isfinite(torch.tensor(losses)))
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    # A clear drop, not noise: at least 5% of the starting loss (observed: 14–70%).
    assert last < 0.95 * first, f"{case}: loss went from {first:.3f} (first 5) to {last:.3f} (last 5)"


@pytest.mark.parametrize(
    "factory, kwargs, error, message",
    [
        (mlp_workload, {"hidden": 0}, ValueError, "hidden must be >= 1, got 0"),
        (mlp_workload, {"layers": 2.5}, TypeError, "layers must be an int, got float 2.5"),
        (lenet_workload, {"conv2": -3}, ValueError, "conv2 must be >= 1, got -3"),
        (resnet18_workload, {"widths": (8, 16)}, None, None),
        (resnet18_workload, {"widths": ()}, ValueError, "widths must have at least one int"),
        (resnet18_workload, {"widths": (8, 0)}, ValueError, r"widths\[1\] must be >= 1, got 0"),
        (transformer_workload, {"d_model": 30, "heads": 4}, ValueError, "d_model must be divisible by heads"),
        (dict_model_workload, {"noise": -1.0}, ValueError, "noise must be >= 0, got -1.0"),
    ],
)
def test_factory_sizes_are_checked(factory, kwargs, error, message):
    if error is None:  # other stage counts are allowed: two stages of widths 8 and 16
        workload = factory(**kwargs)
        model = workload.model()
        convs = [m.out_channels for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
        assert convs == [8] * 5 + [16] * 5  # stem + two basic blocks per stage
        assert [m for m in model.modules() if isinstance(m, torch.nn.Linear)][-1].in_features == 16
        x, _ = workload.batch(0, 4, 0)
        assert model(x).shape == (4, 10)
        return
    with pytest.raises(error, match=message):
        factory(**kwargs)


def test_sizes_change_the_model():
    torch.manual_seed(0)
    small = mlp_workload(hidden=32, layers=1).model()
    assert sum(p.numel() for p in small.parameters()) == 784 * 32 + 32 + 32 * 10 + 10
    torch.manual_seed(0)
    gpt = transformer_workload(vocab=100, context=8, layers=1, heads=2, d_model=16)
    tokens, _ = gpt.batch(0, 2, 0)
    assert tokens.shape == (2, 8) and gpt.model()(tokens).shape == (2, 8, 100)


def test_transformer_rejects_sequences_longer_than_its_context():
    torch.manual_seed(0)
    model = transformer_workload(context=8, d_model=16, heads=2).model()
    with pytest.raises(ValueError, match=r"length <= context=8, got \(2, 9\)"):
        model(torch.zeros(2, 9, dtype=torch.int64))


def test_transformer_is_causal():
    # Changing a later token must not change the logits at earlier positions.
    torch.manual_seed(0)
    model = transformer_workload(vocab=50, context=10, d_model=16, heads=2).model()
    tokens, _ = transformer_workload(vocab=50, context=10).batch(0, 2, 0)
    changed = tokens.clone()
    changed[:, 6] = (changed[:, 6] + 1) % 50
    a, b = model(tokens), model(changed)
    assert torch.equal(a[:, :6], b[:, :6])
    assert not torch.allclose(a[:, 6:], b[:, 6:])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", sorted(EXPECTED_LOGITS))
def test_workload_on_cuda_matches_cpu(name, monkeypatch):
    # Full fp32 on the GPU (no TF32) so the comparison with the CPU reference can be tight.
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    workload = get_workload(name)
    torch.manual_seed(0)
    cpu_model = workload.model()
    gpu_model = copy.deepcopy(cpu_model).cuda()
    inputs, target = workload.batch(0, 4, 0)
    moved = tuple(t.cuda() for t in inputs) if isinstance(inputs, tuple) else inputs.cuda()
    cpu_loss = workload.loss(call_model(cpu_model, inputs), target)
    gpu_loss = workload.loss(call_model(gpu_model, moved), target.cuda())
    cpu_loss.backward()
    gpu_loss.backward()
    assert gpu_loss.device.type == "cuda"
    assert torch.allclose(gpu_loss.cpu(), cpu_loss, rtol=1e-4, atol=1e-5)
    for (param_name, a), b in zip(cpu_model.named_parameters(), gpu_model.parameters()):
        assert torch.allclose(b.grad.cpu(), a.grad, rtol=1e-3, atol=1e-5), f"{name}: gradient of {param_name}"
