"""replicate on CPU (repeated devices): storage sharing, buffers, gradient flow back to the original."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dpbench.parallel import replicate
from dpbench.parallel._functions import Broadcast

from .models import clone, mlp


def test_replica_outputs_match_original_and_module_is_untouched():
    net = mlp()
    names_before = [n for n, _ in net.named_parameters()]
    x = torch.randn(5, 4)
    replicas = replicate(net, ["cpu", "cpu", "cpu"])
    assert len(replicas) == 3 and all(r is not net for r in replicas)
    for r in replicas:
        torch.testing.assert_close(r(x), net(x), rtol=0, atol=0)
    assert [n for n, _ in net.named_parameters()] == names_before
    assert all(p.is_leaf for p in net.parameters())


def test_gradients_of_all_replicas_sum_into_the_original():
    net = mlp()
    ref = clone(net)
    xs = [torch.randn(3, 4) for _ in range(3)]
    replicas = replicate(net, ["cpu"] * 3)
    sum(r(x).pow(2).sum() for r, x in zip(replicas, xs)).backward()
    for x in xs:  # reference: the single module on each shard, gradients accumulated
        ref(x).pow(2).sum().backward()
    for (name, p), q in zip(net.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=lambda m, name=name: f"{name}: {m}")


def test_replica0_shares_parameter_and_buffer_storage_others_copy_buffers():
    net = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))
    replicas = replicate(net, ["cpu", "cpu"])
    for r in replicas:  # parameters are read-only in forward: every replica on the source device views them
        assert r[0].weight.data_ptr() == net[0].weight.data_ptr()
        assert r[0].weight.requires_grad and not r[0].weight.is_leaf
    assert replicas[0][1].running_mean is net[1].running_mean
    # forward updates buffers in place, so other replicas get their own copy (no race, updates lost)
    assert replicas[1][1].running_mean.data_ptr() != net[1].running_mean.data_ptr()
    torch.testing.assert_close(replicas[1][1].running_mean, net[1].running_mean)
    replicas[0](torch.randn(4, 3))
    replicas[1](torch.randn(4, 3) + 10)
    assert net[1].num_batches_tracked.item() == 1
    torch.testing.assert_close(net[1].running_mean, replicas[0][1].running_mean)
    assert not torch.allclose(net[1].running_mean, replicas[1][1].running_mean)


def test_detach_gives_plain_tensors_that_share_storage():
    net = mlp()
    replicas = replicate(net, ["cpu", "cpu"], detach=True)
    for r in replicas:
        w = r[0].weight
        assert not w.requires_grad and w.data_ptr() == net[0].weight.data_ptr()


def test_tied_weights_stay_tied_and_get_one_gradient():
    emb = nn.Embedding(5, 4)
    head = nn.Linear(4, 5, bias=False)
    head.weight = emb.weight
    net = nn.Sequential(emb, head)
    ref = clone(net)
    ids = torch.tensor([[1, 2], [3, 4]])
    r = replicate(net, ["cpu", "cpu"])
    assert r[1][0].weight is r[1][1].weight
    (r[0](ids[:1]).sum() + r[1](ids[1:]).sum()).backward()
    ref(ids).sum().backward()
    torch.testing.assert_close(net[0].weight.grad, ref[0].weight.grad)


def test_hooks_and_submodule_structure_are_kept():
    net = mlp()
    calls = []
    net[0].register_forward_hook(lambda mod, inp, out: calls.append(mod))
    replicas = replicate(net, ["cpu", "cpu"])
    for r in replicas:
        r(torch.randn(2, 4))
    assert len(calls) == 2 and calls[0] is replicas[0][0] and calls[1] is replicas[1][0]


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
def test_empty_devices_and_unreplicable_modules():
    assert replicate(mlp(), []) == []
    with pytest.raises(TypeError, match="network: cannot replicate ScriptModule"):
        replicate(torch.jit.script(nn.Linear(2, 2)), ["cpu", "cpu"])
    # RuntimeError, as torch raises for a lazy module; the message also names the parameter.
    with pytest.raises(
        RuntimeError,
        match=r"uninitialized parameters can't be used with `DataParallel`\. "
        r"network: parameter weight is uninitialized",
    ):
        replicate(nn.LazyLinear(2), ["cpu", "cpu"])
    with pytest.raises(ValueError, match=r"devices\[0\]: expected an int CUDA index"):
        replicate(mlp(), ["tpu"])


def test_broadcast_gradcheck_and_double_backward():
    a = torch.randn(3, dtype=torch.float64, requires_grad=True)
    b = torch.randn(2, 2, dtype=torch.float64, requires_grad=True)
    cpu = torch.device("cpu")

    def fn(x, y):
        outs = Broadcast.apply([cpu, cpu], x, y)
        return outs[0] * 2 + outs[2] ** 2, outs[1] * outs[3]

    assert torch.autograd.gradcheck(fn, (a, b))
    assert torch.autograd.gradgradcheck(fn, (a, b))


def test_broadcast_marks_copies_of_frozen_tensors_non_differentiable():
    p = torch.randn(2, requires_grad=True)
    frozen = torch.randn(2)
    outs = Broadcast.apply([torch.device("cpu")], p, frozen)
    assert outs[0].requires_grad and not outs[1].requires_grad
