"""PyTorch's own DataParallel tests, ported to dpbench.parallel (pipeline steps and dtypes).

Upstream, pinned to the revisions stored for reading:

* ``test/distributed/test_data_parallel.py`` at 8845674172043e13648b6f1689eb85848706c421:
  the scatter / gather / replicate / replica / parallel_apply tests of ``TestDataParallel``
  (``test_zero_grad``, ``test_save_replica_module`` and ``test_parameter_list_dict_replica``
  among them) and all of
  ``TestDataParallelDeviceType`` (float, double, half);
* ``test/test_cuda_multigpu.py`` at fc9325ea0d1cae1bbff1b67e6962e66fe562b39a:
  ``test_scatter_namedtuple``, ``test_gather_namedtuple``;
* ``test/test_nn.py`` at 74f2fa66feec00335f72813782f4802e80bff4cb:
  ``test_ParameterList_replication``, ``test_ParameterDict_replication``.

Mapping and adaptations as in ``test_torch_conformance.py`` (the module-level tests), plus:

* ``test_parallel_apply_passes_exception``: upstream expects torch's "on device 0"; dpbench
  names devices as ``torch.device`` prints them ("cpu", "cuda:0").
* ``test_ParameterList_replication`` / ``test_ParameterDict_replication``: upstream replicates by
  hand because torch's replicate cannot run on CPU ("The actual replication code from DP
  cannot be used on CPU"); here dpbench's replicate does, and replica 0's parameters are views
  of the originals, as upstream's hand-made ones are.

Skipped: none (nothing these tests assert is CUDA-only).
"""

from __future__ import annotations

import collections
import io
import threading
from typing import NamedTuple

import pytest
import torch
from torch import nn

from dpbench.parallel import DataParallel, gather, parallel_apply, replicate, scatter

from .torch_mapping import DeviceMap

# upstream's dtype2prec_DONTUSE for the dtypes TestDataParallelDeviceType runs
DTYPE_PREC = {torch.float: 1e-5, torch.double: 1e-5, torch.half: 1e-2}


def grad_and_gradgrad_checks(fn, inputs) -> None:
    """upstream's _assertGradAndGradgradChecks (batched grad off, as upstream sets)."""
    assert torch.autograd.gradcheck(fn, inputs, check_batched_grad=False)
    assert torch.autograd.gradgradcheck(fn, inputs, check_batched_grad=False)


# upstream: test_parallel_apply
def test_parallel_apply(device_map: DeviceMap):
    l1 = nn.Linear(10, 5).to(device_map.d0, torch.float)
    l2 = nn.Linear(10, 5).to(device_map.d1, torch.float)
    i1 = torch.randn(2, 10, device=device_map.d0, dtype=torch.float)
    i2 = torch.randn(2, 10, device=device_map.d1, dtype=torch.float)
    expected_outputs = (l1(i1), l2(i2))
    # each input is either a collection of positional arguments or the single argument
    for inputs in [((i1,), (i2,)), (i1, i2)]:
        outputs = parallel_apply((l1, l2), inputs, None)
        for out, expected in zip(outputs, expected_outputs):
            torch.testing.assert_close(out, expected)


# upstream: test_parallel_apply_autocast (CUDA autocast → the mapping's)
def test_parallel_apply_autocast(device_map: DeviceMap):
    device_type, amp_dtype = device_map.amp
    l1 = nn.Linear(10, 5).to(device_map.d0, torch.float)
    l2 = nn.Linear(10, 5).to(device_map.d1, torch.float)
    i1 = torch.randn(2, 10, device=device_map.d0, dtype=torch.float)
    i2 = torch.randn(2, 10, device=device_map.d1, dtype=torch.float)
    with torch.autocast(device_type, dtype=amp_dtype):
        expected_outputs = (l1(i1), l2(i2))
    for inputs in [((i1,), (i2,)), (i1, i2)]:
        with torch.autocast(device_type, dtype=amp_dtype):
            outputs = parallel_apply((l1, l2), inputs, None)
        for out, expected in zip(outputs, expected_outputs):
            assert out.dtype == expected.dtype == amp_dtype
            torch.testing.assert_close(out, expected)


# upstream: test_parallel_apply_passes_exception (no tensor input: the module's device is named)
def test_parallel_apply_passes_exception(device_map: DeviceMap):
    class TestModule(nn.Module):
        def forward(self, *args):
            return {}["wonderful"]

    l1 = TestModule().to(device_map.d0, torch.float)
    # upstream's "on device 0": the current CUDA device; without CUDA, the CPU
    where = f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu"
    # one module twice: a single device is enough for this test
    expected = rf"Caught KeyError in replica \d on device {where}.\nOriginal Traceback[\s\S]+wonderful"
    with pytest.raises(KeyError, match=expected):
        parallel_apply(modules=(l1, l1), inputs=(None, None))


def _test_scatter(tensor: torch.Tensor, device_map: DeviceMap) -> None:
    x = tensor.detach().requires_grad_()
    result = scatter(x, device_map.ids)
    assert len(result) == 2
    torch.testing.assert_close(result[0], x[:2].to(device_map.d0))
    assert result[0].device == device_map.d0
    torch.testing.assert_close(result[1], x[2:].to(device_map.d1))
    assert result[1].device == device_map.d1
    grad = result[0].detach().clone().fill_(2)
    result[0].backward(grad)
    torch.testing.assert_close(x.grad[:2], grad.to(x.device))
    torch.testing.assert_close(x.grad[2:], grad.clone().zero_().to(x.device))
    grad_and_gradgrad_checks(lambda y: scatter(y, device_map.ids), (x,))


# upstream: test_scatter_cpu
def test_scatter_cpu(device_map: DeviceMap):
    _test_scatter(torch.randn((4, 4), dtype=torch.double), device_map)


# upstream: test_scatter_gpu (the input starts on the first mapped device)
def test_scatter_gpu(device_map: DeviceMap):
    _test_scatter(torch.randn((4, 4), dtype=torch.double).to(device_map.d0), device_map)


def _check_gathered(result: torch.Tensor, output_device, device_map: DeviceMap) -> None:
    if output_device != -1:
        assert result.device == device_map.device(output_device)
    else:
        assert not result.is_cuda


def _test_gather(output_device, device_map: DeviceMap) -> None:
    target = torch.device("cpu") if output_device == -1 else device_map.device(output_device)
    inputs = (
        torch.randn(2, 4, device=device_map.d0, requires_grad=True, dtype=torch.double),
        torch.randn(2, 4, device=device_map.d1, requires_grad=True, dtype=torch.double),
    )
    result = gather(inputs, output_device)
    assert result.size() == torch.Size([4, 4])
    torch.testing.assert_close(result[:2], inputs[0].to(target))
    torch.testing.assert_close(result[2:], inputs[1].to(target))
    _check_gathered(result, output_device, device_map)
    grad = torch.randn((4, 4), dtype=torch.double, device=target)
    result.backward(grad)
    torch.testing.assert_close(inputs[0].grad, grad[:2].to(device_map.d0))
    torch.testing.assert_close(inputs[1].grad, grad[2:].to(device_map.d1))
    grad_and_gradgrad_checks(lambda x, y: gather((x, y), output_device), inputs)

    # scalar inputs stack into a vector
    inputs = (
        torch.randn((), device=device_map.d0, requires_grad=True, dtype=torch.double),
        torch.randn((), device=device_map.d1, requires_grad=True, dtype=torch.double),
    )
    result = gather(inputs, output_device)
    assert result.size() == torch.Size([2])
    torch.testing.assert_close(result[0], inputs[0].to(target))
    torch.testing.assert_close(result[1], inputs[1].to(target))
    _check_gathered(result, output_device, device_map)
    grad = torch.randn(2, dtype=torch.double, device=target)
    result.backward(grad)
    torch.testing.assert_close(inputs[0].grad, grad[0].to(device_map.d0))
    torch.testing.assert_close(inputs[1].grad, grad[1].to(device_map.d1))
    grad_and_gradgrad_checks(lambda x, y: gather((x, y), output_device), inputs)


# upstream: test_gather_cpu
def test_gather_cpu(device_map: DeviceMap):
    _test_gather(-1, device_map)


# upstream: test_gather_gpu (output_device 0 → the first mapped device)
def test_gather_gpu(device_map: DeviceMap):
    _test_gather(device_map.ids[0], device_map)


# upstream: test_gather_different_len_dicts
def test_gather_different_len_dicts(device_map: DeviceMap):
    inputs = (
        {"a": torch.randn(1, 2, requires_grad=True, device=device_map.d0)},
        {
            "b": torch.randn(1, 2, requires_grad=True, device=device_map.d1),
            "a": torch.randn(1, 2, requires_grad=True, device=device_map.d1),
        },
    )
    with pytest.raises(ValueError):
        gather(inputs, target_device=device_map.ids[0])


# upstream: test_replicate
def test_replicate(device_map: DeviceMap):
    module = nn.Linear(10, 5).float().to(device_map.d0)
    input = torch.randn(2, 10, dtype=torch.float, device=device_map.d0)
    expected_output = module(input)
    for devices in [tuple(device_map.ids), list(device_map.ids)]:
        replicas = replicate(module, devices)
        for i, replica in enumerate(replicas):
            for p in replica.parameters():
                assert p.device == device_map.device(devices[i])
            replica_input = input.to(device_map.device(devices[i]))
            torch.testing.assert_close(replica(replica_input), expected_output.to(replica_input.device))


# upstream: test_replicate_buffers
def test_replicate_buffers(device_map: DeviceMap):
    net = nn.Module()
    net.bn = nn.BatchNorm2d(10)
    net.to(device_map.d0)
    for devices in [tuple(device_map.ids), list(device_map.ids)]:
        replicas = replicate(net, devices)
        for i, replica in enumerate(replicas):
            device = device_map.device(devices[i])
            assert replica.bn.running_mean.device == device, "buffer on wrong device"
            assert replica.bn.running_var.device == device, "buffer on wrong device"
            assert replica.bn.num_batches_tracked.device == device, "buffer on wrong device"


# upstream: test_zero_grad
def test_zero_grad(device_map: DeviceMap):
    # warnings.catch_warnings swaps process-wide state: replicas take turns so each sees its own
    one_at_a_time = threading.Lock()

    class Net(nn.Module):
        def forward(self, x):
            warning = r"Calling \.zero_grad\(\) from a module created with nn\.DataParallel\(\) has no effect."
            with one_at_a_time, pytest.warns(UserWarning, match=warning):
                self.zero_grad()
            return x

    dpm = DataParallel(Net().to(device_map.d0), device_map.all_ids)
    dpm(torch.rand(4, 3, 6, 5))


# upstream: test_save_replica_module (pytorch#37182)
def test_save_replica_module(device_map: DeviceMap):
    module = nn.Linear(8, 8).to(device_map.d0)
    data = io.BytesIO()
    torch.save(replicate(module, devices=device_map.ids, detach=False), data)
    torch.save(replicate(module, devices=device_map.ids, detach=True), data)


# upstream: test_parameter_list_dict_replica
def test_parameter_list_dict_replica(device_map: DeviceMap):
    class MyMod(nn.Module):
        def __init__(self, data, check_fn):
            super().__init__()
            self.data = data
            self.check_fn = check_fn

        def forward(self, inp):
            self.check_fn(self)
            return inp

    p1 = nn.Parameter(torch.rand(10))
    p2 = nn.Parameter(torch.rand(10))
    keys = [0, 1]

    def check_fn(self_):
        torch.testing.assert_close(self_.data[keys[0]], p1.to(self_.data[keys[0]].device))
        torch.testing.assert_close(self_.data[keys[1]], p2.to(self_.data[keys[1]].device))
        assert self_.data[keys[0]].requires_grad and self_.data[keys[1]].requires_grad
        assert self_.data[keys[0]].grad_fn is not None and self_.data[keys[1]].grad_fn is not None

    module = MyMod(nn.ParameterList([p1, p2]), check_fn).to(device_map.d0)
    DataParallel(module, device_map.all_ids)(torch.randn((8, 8), device=device_map.d0))  # runs check_fn
    keys[:] = ["0", "1"]
    module = MyMod(nn.ParameterDict({"0": p1, "1": p2}), check_fn).to(device_map.d0)
    DataParallel(module, device_map.all_ids)(torch.randn((8, 8), device=device_map.d0))


class _TypedPair(NamedTuple):
    a: torch.Tensor
    b: torch.Tensor


# upstream (test_cuda_multigpu): test_scatter_namedtuple
def test_scatter_namedtuple(device_map: DeviceMap):
    fields = ("a", "b")
    num_gpus = len(device_map.all_ids)
    target_gpus = [device_map.device(i) for i in device_map.all_ids]
    for pair_type in (collections.namedtuple("NamedTuple", fields), _TypedPair):
        a = torch.rand(num_gpus * 2, device=device_map.d0)
        b = torch.rand(num_gpus * 2, device=device_map.d0)
        a_tensors_for_gpu = [a[2 * i : 2 * i + 2].to(d) for i, d in enumerate(target_gpus)]
        b_tensors_for_gpu = [b[2 * i : 2 * i + 2].to(d) for i, d in enumerate(target_gpus)]
        inp = pair_type(a, b)
        scatter_out = scatter(inp, target_gpus)
        for i, x in enumerate(scatter_out):
            assert isinstance(x, type(inp))
            assert x._fields == fields
            torch.testing.assert_close(x.a, a_tensors_for_gpu[i])
            torch.testing.assert_close(x.b, b_tensors_for_gpu[i])


# upstream (test_cuda_multigpu): test_gather_namedtuple
def test_gather_namedtuple(device_map: DeviceMap):
    num_gpus = len(device_map.all_ids)
    d0, d1 = device_map.d0, device_map.d1
    for pair_type in (collections.namedtuple("NamedTuple", ["a", "b"]), _TypedPair):
        out1 = pair_type(torch.rand(num_gpus * 2, device=d0), torch.rand(num_gpus * 2, device=d1))
        out2 = pair_type(torch.rand(num_gpus * 2, device=d1), torch.rand(num_gpus * 2, device=d0))
        outputs = [out1, out2]
        for target in ("cpu", device_map.ids[0]):  # upstream: "cpu" and GPU 0
            out = gather(outputs, target)
            for i, x in enumerate(out):
                assert isinstance(x, type(out2[-1]))  # x must be a tensor
                cat = torch.cat((outputs[0][i].to(x.device), outputs[1][i].to(x.device)))
                assert x.device == (torch.device("cpu") if target == "cpu" else d0)
                assert torch.equal(x, cat)


def _check_replicated_parameters(originals, replicas, device_map: DeviceMap) -> None:
    for k, replica in enumerate(replicas):
        for p, p2 in zip(originals, replica):
            torch.testing.assert_close(p2, p.to(p2.device))
            assert p2.grad_fn is not None
            if k == 0:  # replica 0 holds views of the originals (upstream checks exactly this)
                assert p2._base is p


# upstream (test_nn): test_ParameterList_replication
def test_ParameterList_replication(device_map: DeviceMap):
    parameters = [nn.Parameter(torch.randn(2, 2, device=device_map.d0)) for _ in range(2)]
    param_list = nn.ParameterList(parameters)
    replicas = replicate(param_list, device_map.ids)
    _check_replicated_parameters(list(param_list), [list(r) for r in replicas], device_map)


# upstream (test_nn): test_ParameterDict_replication
def test_ParameterDict_replication(device_map: DeviceMap):
    parameters = {
        "foo": nn.Parameter(torch.randn(2, 2, device=device_map.d0)),
        "bar": nn.Parameter(torch.randn(2, 2, device=device_map.d0)),
    }
    param_dict = nn.ParameterDict(parameters)
    replicas = replicate(param_dict, device_map.ids)
    for replica in replicas:
        assert [k for k, _ in param_dict.items()] == [k for k, _ in replica.items()]
    _check_replicated_parameters(
        [p for _, p in param_dict.items()], [[p for _, p in r.items()] for r in replicas], device_map
    )
    torch.testing.assert_close(param_dict["foo"], replicas[0]["foo"])


# --- upstream class TestDataParallelDeviceType (onlyCUDA; here on every mapping) ----------------
DTYPES = [pytest.param(dtype, id=str(dtype).removeprefix("torch.")) for dtype in DTYPE_PREC]


def _linear_and_input(device_map: DeviceMap, dtype: torch.dtype):
    lin = nn.Linear(10, 5).to(device_map.d0, dtype)
    i = torch.randn(20, 10, device=device_map.d0, dtype=dtype)
    return lin, i, lin(i)


def _check_output(out, expected, device_map: DeviceMap, dtype: torch.dtype) -> None:
    assert out.device == device_map.d0  # upstream: out.get_device() == 0
    torch.testing.assert_close(out, expected, atol=DTYPE_PREC[dtype], rtol=0)


class _Net(nn.Module):
    def __init__(self, lin: nn.Module, unwrap: bool):
        super().__init__()
        self.lin = lin
        self.unwrap = unwrap

    def forward(self, input):
        return self.lin(input["data"] if self.unwrap else input)


# upstream: TestDataParallelDeviceType.test_data_parallel_module
@pytest.mark.parametrize("dtype", DTYPES)
def test_data_parallel_module(device_map: DeviceMap, dtype):
    lin, i, expected_out = _linear_and_input(device_map, dtype)
    _check_output(DataParallel(lin, device_map.all_ids)(i), expected_out, device_map, dtype)


# upstream: TestDataParallelDeviceType.test_data_parallel_module_kwargs_only
@pytest.mark.parametrize("dtype", DTYPES)
def test_data_parallel_module_kwargs_only(device_map: DeviceMap, dtype):
    lin, i, expected_out = _linear_and_input(device_map, dtype)
    n = DataParallel(_Net(lin, unwrap=False), device_map.all_ids)
    _check_output(n(input=i), expected_out, device_map, dtype)


def _check_kwargs_only_with_unused(device_map: DeviceMap, dtype: torch.dtype, unused) -> None:
    lin, i, expected_out = _linear_and_input(device_map, dtype)
    n = DataParallel(_Net(lin, unwrap=True), device_map.all_ids)
    _check_output(n(input={"data": i, "unused": unused}), expected_out, device_map, dtype)


# upstream: TestDataParallelDeviceType.test_data_parallel_module_kwargs_only_empty_list
@pytest.mark.parametrize("dtype", DTYPES)
def test_data_parallel_module_kwargs_only_empty_list(device_map: DeviceMap, dtype):
    _check_kwargs_only_with_unused(device_map, dtype, [])


# upstream: TestDataParallelDeviceType.test_data_parallel_module_kwargs_only_empty_dict
@pytest.mark.parametrize("dtype", DTYPES)
def test_data_parallel_module_kwargs_only_empty_dict(device_map: DeviceMap, dtype):
    _check_kwargs_only_with_unused(device_map, dtype, {})


# upstream: TestDataParallelDeviceType.test_data_parallel_module_kwargs_only_empty_tuple
@pytest.mark.parametrize("dtype", DTYPES)
def test_data_parallel_module_kwargs_only_empty_tuple(device_map: DeviceMap, dtype):
    _check_kwargs_only_with_unused(device_map, dtype, ())
