"""PyTorch's own DataParallel tests, ported to dpbench.parallel (module-level tests).

Upstream: ``test/distributed/test_data_parallel.py`` at pytorch/pytorch
8845674172043e13648b6f1689eb85848706c421 (the revision stored for reading; classes
``TestDataParallel`` and ``TestDataParallelDeviceType``). The pipeline-level tests (scatter,
gather, replicate and replicas, parallel_apply), ``test/test_cuda_multigpu.py``'s namedtuple
tests and ``test/test_nn.py``'s ParameterList/ParameterDict replication are in
``test_torch_conformance_pipeline.py``.

Each test keeps its upstream name and assertions. Mapping (see ``torch_mapping.py``): upstream's
``(0, 1)`` runs as ``["cpu", "cpu"]`` (``range(device_count())`` as three CPU replicas),
``.cuda()`` becomes the mapped device, CUDA autocast becomes CPU autocast (bfloat16); with two
GPUs visible every test also runs with the original device numbers. Adaptations, each noted
at the test:

* ``test_data_parallel_model_device``: on CPU the "wrong device" is ``meta``.
* The dtype and memory-layout tests (complex, autocast, strided gradient layout) and their
  adaptations are in ``test_torch_conformance_dtypes.py``.

Skipped: none of these tests is CUDA-only in what it asserts. What is dropped is CUDA-only
machinery around the assertions: ``torch.cuda.device(...)`` contexts (the mapped device is
passed instead) and cuDNN flags.
"""

from __future__ import annotations

import contextlib
import gc
from collections import OrderedDict
from copy import deepcopy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dpbench.parallel import DataParallel, data_parallel

from .torch_mapping import DeviceMap


def gradcheck(fn, inputs) -> None:
    # upstream: batched grad is not supported under data parallel
    assert torch.autograd.gradcheck(fn, inputs, check_batched_grad=False)


# upstream: test_data_parallel_buffers_requiring_grad
def test_data_parallel_buffers_requiring_grad(device_map: DeviceMap):
    class TestModule(nn.Module):
        def __init__(self, t):
            super().__init__()
            self.register_buffer("t_rg", t)
            self.register_buffer("t_not_rg", t.clone().detach())

        def forward(self, x):
            return x * self.t_rg + self.t_not_rg

    m = TestModule(torch.randn(100, device=device_map.d0, dtype=torch.double, requires_grad=True))
    assert m.t_rg.requires_grad
    dpm = DataParallel(m, device_map.ids)
    inp = torch.randn(2, 100, device=device_map.d0, dtype=torch.double)
    gradcheck(lambda t: dpm(inp), (m.t_rg,))


# upstream: test_data_parallel_rnn (LSTM sizes and lr kept; default dtype double, as upstream sets)
@pytest.mark.slow
def test_data_parallel_rnn(device_map: DeviceMap):
    class TestModule(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(300, 1024, 1, batch_first=True, bidirectional=True, dtype=torch.double)

        def forward(self, x):
            self.rnn.flatten_parameters()
            return self.rnn(x)

    def step(model):
        opt = torch.optim.SGD(model.parameters(), lr=10)
        output = model(torch.ones(4, 4, 300, dtype=torch.double, device=device_map.d0))
        F.mse_loss(output[0], torch.zeros_like(output[0])).backward()
        opt.step()

    with torch.no_grad():
        model = TestModule().to(device_map.d0)
        model_dp = DataParallel(deepcopy(model), device_map.all_ids)
        # DataParallel must not crash with grad disabled (pytorch#21108)
        model_dp(torch.rand(2, 4, 300, dtype=torch.double, device=device_map.d0))
    step(model)
    step(model_dp)
    for p1, p2 in zip(model.parameters(), model_dp.parameters()):
        assert p1.allclose(p2)


# upstream: test_data_parallel_lazy_linear
def test_data_parallel_lazy_linear(device_map: DeviceMap):
    with pytest.raises(RuntimeError, match="Modules with uninitialized parameters"):
        model_dp = DataParallel(nn.LazyLinear(10).to(device_map.d0), device_map.all_ids)
        model_dp(torch.rand(10, 10, device=device_map.d0))


# upstream: test_data_parallel_multiple_input
def test_data_parallel_multiple_input(device_map: DeviceMap):
    class TestModule(nn.Module):
        def forward(self, var1, var2, float1, var3=None):
            if var3 is None:
                return float1 * (var1 * var2)
            return float1 * (var1 * var2 + var3)

    m = TestModule()
    var1 = torch.randn(5, 5, dtype=torch.float, requires_grad=True)
    var2 = torch.randn(5, 5, dtype=torch.float, requires_grad=True)
    var3 = torch.randn(5, 5, dtype=torch.float, requires_grad=False)
    float1 = torch.randn(1).item()

    def expect(**kwargs):
        var1.grad, var2.grad = None, None
        m(var1, var2, float1, **kwargs).sum().backward()
        return m(var1, var2, float1, **kwargs).detach(), var1.grad.clone(), var2.grad.clone()

    def local_test(out, expected):
        with torch.no_grad():
            var1.grad.fill_(0.0)
            var2.grad.fill_(0.0)
        out.sum().backward()
        torch.testing.assert_close(out.cpu(), expected[0])
        torch.testing.assert_close(var1.grad, expected[1])
        torch.testing.assert_close(var2.grad, expected[2])

    ids, first = device_map.ids, device_map.ids[:1]
    expected = expect()
    local_test(data_parallel(m, (var1, var2, float1), ids), expected)
    local_test(data_parallel(m, (var1, var2, float1), ids[::-1]), expected)
    local_test(data_parallel(m, (var1, var2, float1), first), expected)

    expected = expect(var3=var3)
    local_test(DataParallel(TestModule(), device_map.all_ids)(var1, var2, float1, var3=var3), expected)
    local_test(DataParallel(TestModule(), device_ids=first)(var1, var2, float1, var3=var3), expected)
    kwarg_wrap = {"var3": var3}
    local_test(data_parallel(m, (var1, var2, float1), ids, module_kwargs=kwarg_wrap), expected)
    local_test(data_parallel(m, (var1, var2, float1), first, module_kwargs=kwarg_wrap), expected)


# upstream: test_data_parallel_small_back
def test_data_parallel_small_back(device_map: DeviceMap):
    lin = nn.Linear(10, 5).float().to(device_map.d0)
    i = torch.randn(20, 10, dtype=torch.float, device=device_map.d0)
    out = data_parallel(lin, i, device_map.ids)
    torch.testing.assert_close(out, lin(i))


def _check_model_device(inner_m, dp_device, inp, device_ids, should_fail):
    """upstream's inner ``test``: the DataParallel module and the function check device_ids[0]."""
    first = device_ids[0]
    expect_device = torch.device("cuda", first) if isinstance(first, int) else torch.device(first)
    error_msg = f"module must have its parameters and buffers on device {expect_device}"

    def assert_correct():
        return pytest.raises(RuntimeError, match=error_msg) if should_fail else contextlib.nullcontext()

    dpm = DataParallel(inner_m, device_ids)
    if dp_device is not None:
        dpm = dpm.to(dp_device)
    with assert_correct():
        dpm(inp)
    with assert_correct():
        data_parallel(inner_m.to(dp_device), inp, device_ids)


# upstream: test_data_parallel_model_device (on CPU the module's "other device" is meta)
def test_data_parallel_model_device(device_map: DeviceMap):
    lin = nn.Linear(2, 2)
    inp = torch.randn(2, 2)
    test = _check_model_device
    if not device_map.is_cuda:
        ids = list(device_map.ids)
        test(deepcopy(lin).to("meta"), None, inp, ids, should_fail=True)
        test(lin.cpu(), None, inp, ids, should_fail=False)
        test(nn.Sequential(lin.cpu()), None, inp, ids, should_fail=False)
        test(nn.Sequential(deepcopy(lin).to("meta"), lin.cpu()), None, inp, ids, should_fail=True)
        test(nn.Sequential(lin.cpu(), deepcopy(lin).to("meta")), None, inp, ids, should_fail=True)
        test(nn.Sequential(lin.cpu(), deepcopy(lin).cpu()), None, inp, ids, should_fail=False)
        return
    all_ids = list(device_map.all_ids)
    inp_cuda0, inp_cuda1 = inp.cuda(0), inp.cuda(1)
    test(lin.to("cpu"), None, inp, all_ids, should_fail=True)
    test(lin.cuda(1), None, inp_cuda0, all_ids, should_fail=True)
    test(lin.cuda(), None, inp_cuda0, [1, 0], should_fail=True)
    test(lin.cuda(), None, inp_cuda0, all_ids, should_fail=False)
    test(lin.cpu(), "cuda", inp_cuda0, all_ids, should_fail=False)
    test(lin.cuda(1), None, inp_cuda1, [1, 0], should_fail=False)
    test(lin.cpu(), "cuda:1", inp_cuda1, [1, 0], should_fail=False)
    cases = [
        (nn.Sequential(lin.cpu()), (True, True, True)),
        (nn.Sequential(deepcopy(lin).cpu(), lin.cuda()), (True, True, True)),
        (nn.Sequential(lin.cuda(), deepcopy(lin).cuda(1)), (True, True, True)),
    ]
    for s, fails in cases:
        for device_ids, should_fail in zip((all_ids, [0, 1], [1, 0]), fails):
            test(s, None, inp, device_ids, should_fail=should_fail)
    s = nn.Sequential(lin.cuda(), deepcopy(lin).cuda())
    test(s, None, inp, all_ids, should_fail=False)
    test(s, None, inp, [0, 1], should_fail=False)
    test(s, None, inp, [1, 0], should_fail=True)
    test(s.cpu(), None, inp, [1, 0], should_fail=True)
    test(s.cuda(1), None, inp, [1, 0], should_fail=False)


# upstream: test_data_parallel_model_no_refcycles
def test_data_parallel_model_no_refcycles(device_map: DeviceMap):
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(1, 1)

        def forward(self, x):
            return self.linear(x)

    gc.collect()
    model = DataParallel(Model().to(device_map.d0), device_map.all_ids)
    data = torch.randn(1, device=device_map.d0)
    model(data)
    assert gc.collect() == 0


# upstream: test_data_parallel_no_grad
def test_data_parallel_no_grad(device_map: DeviceMap):
    class Layer(nn.Module):
        def forward(self, x):
            assert not torch.is_grad_enabled()
            return x

    lin = Layer()
    i = torch.randn(20, 10, dtype=torch.float, device=device_map.d0)
    with torch.no_grad():
        data_parallel(lin, i, device_map.ids)
    with pytest.raises(AssertionError):
        data_parallel(lin, i, device_map.ids)


def _check_against_one_device(lin: nn.Module, i: torch.Tensor, device_map: DeviceMap, grad_of=lambda g: g):
    """upstream's body of test_data_parallel / test_data_parallel_sparse."""
    expected_out = lin(i)
    expected_out.sum().backward()
    expected_grads = [grad_of(p.grad.clone()) for p in lin.parameters()]
    for dev_id in (device_map.ids, device_map.ids[::-1]):
        # upstream: `with torch.cuda.device(dev_id[0]): l.cuda()`
        lin.to(device_map.device(dev_id[0]))
        lin.zero_grad()
        out = data_parallel(lin, i, dev_id)
        out.sum().backward()
        assert out.device == device_map.device(dev_id[0])
        torch.testing.assert_close(out, expected_out.to(out.device))
        for expected, param in zip(expected_grads, lin.parameters()):
            torch.testing.assert_close(grad_of(param.grad), expected.to(param.device))
    # None device_ids: every GPU, or the CPU without CUDA
    lin.to(device_map.d0)
    data_parallel(lin, i)


# upstream: test_data_parallel
def test_data_parallel(device_map: DeviceMap):
    lin = nn.Linear(10, 5).float().to(device_map.d1)
    i = torch.randn(20, 10, dtype=torch.float, device=device_map.d1)
    _check_against_one_device(lin, i, device_map)


# upstream: test_data_parallel_sparse
def test_data_parallel_sparse(device_map: DeviceMap):
    lin = nn.Embedding(10, 5, sparse=True).to(device_map.d1)
    i = torch.randint(10, (20, 5), device=device_map.d1, dtype=torch.long)
    _check_against_one_device(lin, i, device_map, grad_of=lambda g: g.coalesce().to_dense())


# upstream: test_data_parallel_nested_output
def test_data_parallel_nested_output(device_map: DeviceMap):
    def fn(input):
        return [input, (input.sin(), input.cos(), [input.add(1)]), input, OrderedDict(a=input, b=[input.sin()])]

    class Net(nn.Module):
        def forward(self, input):
            return fn(input)

    i = torch.randn(2, 2).float().to(device_map.d1)
    output = data_parallel(Net(), i, device_map.all_ids)
    torch.testing.assert_close(output, [t for t in fn(i.to(device_map.d0))], check_device=True)
    assert isinstance(output[0], torch.Tensor)
    assert isinstance(output[1], tuple)
    assert isinstance(output[1][0], torch.Tensor) and isinstance(output[1][1], torch.Tensor)
    assert isinstance(output[1][2], list) and isinstance(output[1][2][0], torch.Tensor)
    assert isinstance(output[2], torch.Tensor)
    assert isinstance(output[3], dict) and len(output[3]) == 2
    assert "a" in output[3] and "b" in output[3]
    assert isinstance(output[3]["a"], torch.Tensor)
    assert isinstance(output[3]["b"], list) and isinstance(output[3]["b"][0], torch.Tensor)


# upstream: test_data_parallel_nested_input
def test_data_parallel_nested_input(device_map: DeviceMap):
    def fn(input):
        return input[1][0]

    class Net(nn.Module):
        def forward(self, *input):
            return fn(input)

    i = torch.randn(20, 3, dtype=torch.float, device=device_map.d1)
    input = (i.cos(), (i.sin(), i), i.sin())
    output = data_parallel(Net(), input, device_map.all_ids)
    torch.testing.assert_close(output, fn(input).to(device_map.d0))


# upstream: test_data_parallel_module_zero_inputs
def test_data_parallel_module_zero_inputs(device_map: DeviceMap):
    class TestModule(nn.Module):
        def forward(self):
            t = torch.eye(2, 3, device=device_map.d0)
            return t + (1 - t)

    def test_helper(output, expected):
        assert output.device == device_map.d0
        torch.testing.assert_close(output, expected)

    expected = torch.ones(2, 3, device=device_map.d0)
    model = TestModule()
    test_helper(DataParallel(model, device_map.ids[:1])(), expected)
    test_helper(DataParallel(model, device_map.ids)(), expected)
    test_helper(data_parallel(model, None, device_map.ids[:1]), expected)
    test_helper(data_parallel(model, (), device_map.ids), expected)


# upstream: test_data_parallel_device_args
def test_data_parallel_device_args(device_map: DeviceMap):
    d0, d1 = device_map.d0, device_map.d1
    lin = nn.Linear(10, 5).to(d0, torch.float)
    i = torch.randn(20, 10, dtype=torch.float, device=d0, requires_grad=True)
    out = data_parallel(lin, i, device_ids=device_map.ids, output_device=d0)  # output_device
    torch.testing.assert_close(out, lin(i))
    lin = nn.Linear(10, 5).to(d0, torch.float)
    i = torch.randn(20, 10, dtype=torch.float, device=d0, requires_grad=True)
    out = data_parallel(lin, i, device_ids=(d0, d1), output_device=d0)  # torch.device device_ids
    torch.testing.assert_close(out, lin(i))


# upstream: test_data_parallel_function_deletion (pytorch#16532): the unused bias gets zeros
def test_data_parallel_function_deletion(device_map: DeviceMap):
    def gradient_penalty(net, x):
        output = net(x)
        return torch.autograd.grad(
            outputs=output, inputs=x, grad_outputs=x.new_ones(output.size()), create_graph=True, retain_graph=True
        )[0].mean()

    net = nn.Linear(4, 1).to(device_map.d0)
    dpn = DataParallel(net, device_map.ids)
    x = torch.ones(2, 4, requires_grad=True).to(device_map.d0)
    dpn.zero_grad()
    gradient_penalty(dpn, x).backward()
    grads = [p.grad for p in net.parameters()]
    assert len(grads) == 2
    torch.testing.assert_close(grads[0], torch.tensor([[0.25, 0.25, 0.25, 0.25]], device=device_map.d0))
    torch.testing.assert_close(grads[1], torch.tensor([0.0], device=device_map.d0))
