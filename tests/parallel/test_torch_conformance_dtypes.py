"""PyTorch's own DataParallel tests, ported to dpbench.parallel (dtypes and memory layouts).

Upstream: ``test/distributed/test_data_parallel.py`` at pytorch/pytorch
8845674172043e13648b6f1689eb85848706c421 (class ``TestDataParallel``): the complex, autocast and
strided-gradient-layout tests. The other module-level tests are in ``test_torch_conformance.py``,
whose mapping (see ``torch_mapping.py``) these follow. Adaptations, each noted at the test:

* ``test_data_parallel_complex``: the pinned revision asserts torch's former ``view_as_real``
  artifact (a ``[1, 10, 2]`` real output); torch 2.13's Broadcast/Scatter convert back to
  complex (torch/nn/parallel/_functions.py), so the output equals the module's, complex.
* ``test_strided_grad_layout``: ``torch.backends.cudnn.flags`` applies on CUDA only.
"""

from __future__ import annotations

import contextlib
from copy import deepcopy
from itertools import product

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dpbench.parallel import DataParallel

from .torch_mapping import DeviceMap


# upstream: test_data_parallel_complex (torch 2.13 keeps complex dtypes; see the module docstring)
def test_data_parallel_complex(device_map: DeviceMap):
    class Cplx(nn.Module):
        def __init__(self):
            super().__init__()
            self.cplx = nn.Parameter(torch.zeros(1, 10, dtype=torch.cfloat, device=device_map.d0))

        def forward(self, x):
            return x + self.cplx

    cplx = DataParallel(Cplx().to(device_map.d0), device_map.all_ids)
    input = torch.rand(1, 10, dtype=torch.cfloat, device=device_map.d0)
    result = cplx(input)
    assert result.size() == torch.Size([1, 10]) and result.dtype == torch.cfloat
    torch.testing.assert_close(result, input)
    if device_map.is_cuda:  # the reference itself, where it can run
        torch.testing.assert_close(result, nn.DataParallel(cplx.module)(input))


# upstream: test_autocast (CUDA float16 → the mapping's autocast: bfloat16 on CPU)
def test_autocast(device_map: DeviceMap):
    device_type, amp_dtype = device_map.amp

    class Model(nn.Linear):
        def __init__(self):
            super().__init__(8, 8)

        @torch.autocast(device_type, dtype=amp_dtype)
        def forward(self, input):
            return super().forward(input)

    model = DataParallel(Model().to(device_map.d0).to(dtype=torch.float32), device_map.all_ids)
    input = torch.randn((8, 8), dtype=torch.float32, device=device_map.d0)
    assert model(input).dtype is amp_dtype


# upstream: test_strided_grad_layout (cuDNN flags on CUDA only)
@pytest.mark.slow
def test_strided_grad_layout(device_map: DeviceMap):
    class ConvNet(nn.Module):
        def __init__(self, layouts, dtype_list):
            super().__init__()
            self.dtypes = dtype_list
            sizes = [(8, 16), (16, 32), (32, 16), (16, 8)]
            for k, ((cin, cout), fmt, dtype) in enumerate(zip(sizes, layouts, dtype_list)):
                setattr(self, f"conv{k}", nn.Conv2d(cin, cout, (2, 2)).to(memory_format=fmt, dtype=dtype))

        def forward(self, x):
            x = x.to(self.dtypes[0])
            x = self.conv0(x).to(self.dtypes[1])
            x = self.conv1(x).to(self.dtypes[2])
            x = self.conv2(x).to(self.dtypes[3])
            return self.conv3(x)

    layer_formats = (
        [torch.contiguous_format] * 4,
        [torch.channels_last] * 2 + [torch.contiguous_format] * 2,
        [torch.channels_last] * 4,
    )
    layer_dtypes = ([torch.float] * 4, [torch.float] * 2 + [torch.half] * 2, [torch.half] * 4)
    ndevs = len(device_map.all_ids)
    input = torch.randn(ndevs * 8, 8, 8, 8, device=device_map.d0, dtype=torch.float)
    target = torch.randn(ndevs * 8, 8, 4, 4, device=device_map.d0, dtype=torch.float)
    flags = (
        torch.backends.cudnn.flags(enabled=True, deterministic=True, benchmark=False)
        if device_map.is_cuda
        else contextlib.nullcontext()
    )
    with flags:
        for formats, dtype_list in product(layer_formats, layer_dtypes):
            m = ConvNet(formats, dtype_list).to(device_map.d0)
            m_dp = DataParallel(deepcopy(m), device_ids=device_map.all_ids)
            opt = torch.optim.SGD(m.parameters(), lr=0.1)
            opt_dp = torch.optim.SGD(m_dp.parameters(), lr=0.1)
            tol = 1e-3 if any(p.dtype is torch.half for p in m.parameters()) else 1e-5
            for it in range(2):  # the first iteration creates grads, the second reuses zeroed ones
                F.mse_loss(m(input).float(), target).backward()
                F.mse_loss(m_dp(input).float(), target).backward()
                children = zip(m.named_children(), m_dp.module.children())
                for i, ((layer_name, m_child), m_dp_child) in enumerate(children):
                    msg = f"{layer_name}.weight iter={it} formats={formats} dtypes={dtype_list}"
                    assert m_child.weight.grad.is_contiguous(memory_format=formats[i]), msg
                    assert m_dp_child.weight.grad.is_contiguous(memory_format=formats[i]), msg
                    for p, p_dp in zip(m_child.parameters(), m_dp_child.parameters()):
                        torch.testing.assert_close(p.grad, p_dp.grad, rtol=tol, atol=tol, msg=msg)
                opt.step()
                opt_dp.step()
                opt.zero_grad()
                opt_dp.zero_grad()
