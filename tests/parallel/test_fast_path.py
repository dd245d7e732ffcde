"""DataParallel on one device with its inputs already there calls the module itself.

No scatter, no copy, no autograd node of DataParallel's own: the output is the module's
output (same autograd history), and a module on the wrong device still gets the clear error.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dpbench.parallel import DataParallel, data_parallel


def small_mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))


def test_module_receives_the_input_tensor_itself_and_its_output_is_returned_as_is():
    net = small_mlp()
    received, produced = [], []
    net.register_forward_pre_hook(lambda m, args: received.append(args[0]))
    net.register_forward_hook(lambda m, args, out: produced.append(out))
    x = torch.randn(5, 8, requires_grad=True)
    with DataParallel(net, ["cpu"]) as dp:
        out = dp(x)
    assert received[0] is x  # not a copy, not a view made by a scatter
    assert out is produced[0]  # no gather, no extra autograd node
    assert type(out.grad_fn).__name__ == "AddmmBackward0"
    out.sum().backward()
    ref = small_mlp()
    x_ref = x.detach().clone().requires_grad_()
    ref(x_ref).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=0, atol=0)
    for p, q in zip(net.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=0)


def test_keyword_and_plain_value_inputs_take_the_fast_path_too():
    class Scaled(nn.Module):
        def forward(self, x, *, scale, note=None):
            return x * scale, note

    x = torch.randn(4, 2)
    with DataParallel(Scaled(), ["cpu"]) as dp:
        out, note = dp(x, scale=torch.tensor(2.0), note="kept")
    torch.testing.assert_close(out, x * 2)
    assert note == "kept"


def test_container_inputs_still_work_through_the_general_path():
    class Pair(nn.Module):
        def forward(self, pair):
            return pair[0] + pair[1]

    a, b = torch.randn(3, 2), torch.randn(3, 2)
    with DataParallel(Pair(), ["cpu"]) as dp:
        torch.testing.assert_close(dp((a, b)), a + b)


def test_a_module_on_the_wrong_device_still_gets_the_device_error():
    net = small_mlp()
    dp = DataParallel(net, ["cpu"])  # a one-device DataParallel puts the module there when built
    net.to("meta")  # ... and then it moves: meta exists on every machine; a CPU input cannot meet it
    with pytest.raises(RuntimeError, match=r"module must have its parameters and buffers on device cpu"):
        dp(torch.randn(2, 8))


def test_record_phases_on_the_fast_path_reports_the_apply_time():
    with DataParallel(small_mlp(), ["cpu"], record_phases=True) as dp:
        dp(torch.randn(5, 8))
    assert dp.phase_times["apply"] > 0
    assert set(dp.phase_times) == {"scatter", "replicate", "apply", "gather"}


def test_functional_form_takes_the_fast_path():
    net = small_mlp()
    x = torch.randn(5, 8)
    torch.testing.assert_close(data_parallel(net, x, ["cpu"]), net(x), rtol=0, atol=0)
