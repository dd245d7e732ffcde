"""CUDA checks: dpbench.parallel.DataParallel against torch.nn.DataParallel, exactly (gradients over
more than two GPUs: to float rounding, see assert_grads_match).

Every test here needs CUDA and is skipped with that reason elsewhere; the same logic is covered
on CPU replicas by the other files in this directory.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dpbench.parallel import DataParallel
from dpbench.schema import Phase

from .models import StructOut, clone

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


@pytest.fixture(autouse=True)
def deterministic_cuda():
    """Bit-for-bit comparisons need deterministic kernels and no TF32 rounding in convolutions."""
    saved = (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32 = (
        True,
        False,
        False,
    )
    yield
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32 = saved


class SpatialMean(nn.Module):
    # mean's backward is an expand: deterministic, unlike adaptive pooling's atomics on CUDA
    def forward(self, x):
        return x.mean(dim=(2, 3))


def convnet(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1),
        nn.ReLU(),
        SpatialMean(),
        nn.Linear(8, 5),
    ).cuda()


def step(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    out = model(x)
    out.float().pow(2).sum().backward()
    return out


def assert_grads_match(ours: torch.Tensor, theirs: torch.Tensor, *, replicas: int, name: str = "") -> None:
    """Bit for bit up to 2 replicas: a sum of two is the same in any order. Beyond, torch's
    DataParallel reduces gradients with NCCL (ring/tree order) while ours sums sequentially, and
    float addition is not associative: equal to rounding, so a float tolerance."""
    if replicas <= 2:
        assert torch.equal(ours, theirs), name
    else:
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6, msg=lambda m: f"{name}: {m}")


def assert_identical(
    ours: nn.Module, theirs: nn.Module, out_ours: torch.Tensor, out_theirs: torch.Tensor, *, replicas: int = 1
) -> None:
    # Same shards, same kernels: outputs agree bit for bit; gradients too up to two replicas.
    assert out_ours.device == out_theirs.device
    assert torch.equal(out_ours, out_theirs)
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
        assert_grads_match(p.grad, q.grad, replicas=replicas, name=name)


def torch_dp_or_skip(module: nn.Module, device_ids: list[int]) -> nn.DataParallel:
    dp = nn.DataParallel(module, device_ids=device_ids)
    try:
        dp(torch.randn(2, 3, 8, 8, device="cuda:0"))
    except Exception as exc:  # torch may refuse repeated devices; that is what ours adds
        pytest.skip(f"torch.nn.DataParallel cannot run device_ids={device_ids}: {type(exc).__name__}: {exc}")
    module.zero_grad(set_to_none=True)
    return dp


@pytest.mark.parametrize("batch", [8, 7])
def test_one_gpu_matches_torch_dataparallel_exactly(batch):
    ours_net, theirs_net = convnet(), convnet()
    x = torch.randn(batch, 3, 8, 8, device="cuda:0")
    with DataParallel(ours_net, [0]) as ours:
        out = step(ours, x)
    assert_identical(ours_net, theirs_net, out, step(nn.DataParallel(theirs_net, device_ids=[0]), x))


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs at least 2 CUDA devices")
@pytest.mark.parametrize("batch", [16, 7, 1])
def test_all_gpus_match_torch_dataparallel(batch):
    ids = list(range(torch.cuda.device_count()))
    ours_net, theirs_net = convnet(), convnet()
    x = torch.randn(batch, 3, 8, 8, device="cuda:0")
    with DataParallel(ours_net, ids) as ours:
        out = step(ours, x)
    theirs_out = step(nn.DataParallel(theirs_net, device_ids=ids), x)
    assert_identical(ours_net, theirs_net, out, theirs_out, replicas=min(len(ids), batch))


@pytest.mark.parametrize("batch", [8, 5])
def test_two_replicas_on_one_gpu_match_single_module_and_torch(batch):
    ours_net, theirs_net, single = convnet(), convnet(), convnet()
    x = torch.randn(batch, 3, 8, 8, device="cuda:0")
    with DataParallel(ours_net, ["cuda:0", "cuda:0"]) as ours:
        out = step(ours, x)
    expected = step(single, x)
    torch.testing.assert_close(out, expected)
    for p, q in zip(ours_net.parameters(), single.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
    theirs = torch_dp_or_skip(theirs_net, [0, 0])
    assert_identical(ours_net, theirs_net, out, step(theirs, x))


def test_cpu_input_scattered_to_gpu_and_output_device_cpu():
    net = convnet()
    ref = clone(net)
    x = torch.randn(6, 3, 8, 8, requires_grad=True)
    with DataParallel(net, ["cuda:0", "cuda:0"], output_device="cpu") as dp:
        out = dp(x)
    assert out.device.type == "cpu"
    out.sum().backward()
    x_ref = x.detach().cuda().requires_grad_()
    ref(x_ref).sum().backward()
    torch.testing.assert_close(out, ref(x_ref.detach()).cpu())
    torch.testing.assert_close(x.grad, x_ref.grad.cpu())  # gradient flows back through scatter to CPU


def test_batchnorm_on_gpu_records_replica_0_stats():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6)).cuda()
    ref = clone(net)
    x = torch.randn(8, 4, device="cuda:0")
    with DataParallel(net, ["cuda:0", "cuda:0"]) as dp:
        dp(x)
    ref(x[:4])
    torch.testing.assert_close(net[1].running_mean, ref[1].running_mean)
    torch.testing.assert_close(net[1].running_var, ref[1].running_var)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cuda_autocast_dtype_reaches_every_replica(dtype):
    net = convnet()
    x = torch.randn(4, 3, 8, 8, device="cuda:0")
    with DataParallel(net, ["cuda:0", "cuda:0"], gather_layout="skip") as dp:
        with torch.autocast("cuda", dtype=dtype):
            outs = dp(x)
    assert [o.dtype for o in outs] == [dtype, dtype]


def test_struct_outputs_and_record_phases_on_gpu():
    net = StructOut("dict").cuda()
    with DataParallel(net, ["cuda:0", "cuda:0"], record_phases=True) as dp:
        out = dp(torch.randn(6, 4, device="cuda:0"))
    assert out["logits"].shape == (6, 3) and out["aux"]["norm"].shape == (2,)
    assert set(dp.phase_times) == {p.value for p in (Phase.SCATTER, Phase.REPLICATE, Phase.APPLY, Phase.GATHER)}
    # Two replicas on cuda:0: scatter and replicate may copy nothing (the input and the module are
    # already there), so only apply, the replicas' forward kernels, must take device time.
    assert dp.phase_times[Phase.APPLY.value] > 0, dp.phase_times
    assert all(v >= 0 for v in dp.phase_times.values()), dp.phase_times


def test_module_on_cpu_with_gpu_device_ids_gives_torchs_error():
    net = nn.Linear(4, 2)
    with DataParallel(net, ["cuda:0", "cuda:0"]) as dp:
        with pytest.raises(
            RuntimeError,
            match=r"module must have its parameters and buffers on device cuda:0 \(device_ids\[0\]\) but "
            r"found one of them on device: cpu",
        ):
            dp(torch.randn(4, 4))


def test_out_of_range_cuda_index_is_a_clear_error():
    count = torch.cuda.device_count()
    with pytest.raises(ValueError, match=rf"device_ids\[1\]: got 'cuda:{count}' but only {count} CUDA device"):
        DataParallel(nn.Linear(2, 2).cuda(), [0, count])
