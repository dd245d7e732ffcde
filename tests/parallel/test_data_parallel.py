"""DataParallel on CPU replicas against the single-device module: outputs and every param.grad."""

from __future__ import annotations

import copy
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from torch import nn

from dpbench.parallel import DataParallel, data_parallel
from dpbench.schema import Phase

from .models import DictIn, Pair, Result, StructOut, TwoInputs, assert_same_grads, clone, mlp

REPLICAS = [pytest.param(["cpu"] * 2, id="2cpu"), pytest.param(["cpu"] * 3, id="3cpu")]


def run_both(module, devices, *args, dp_kwargs=None, loss=lambda out: out.pow(2).sum(), **kwargs):
    """Forward + backward of ``module`` under DataParallel and of an identical copy directly."""
    ref = clone(module)
    with DataParallel(module, devices, **(dp_kwargs or {})) as dp:
        out = dp(*args, **kwargs)
        loss(out).backward()
    expected = ref(*args, **kwargs)
    loss(expected).backward()
    return out, expected, ref


@pytest.mark.parametrize("devices", REPLICAS)
@pytest.mark.parametrize("batch", [9, 7, 2, 1], ids=lambda b: f"batch{b}")
def test_flat_input_outputs_and_grads_match_single_module(devices, batch):
    net = mlp()
    out, expected, ref = run_both(net, devices, torch.randn(batch, 4))
    torch.testing.assert_close(out, expected)
    assert_same_grads(net, ref)


@pytest.mark.parametrize("devices", REPLICAS)
def test_nested_and_keyword_inputs(devices):
    net = TwoInputs()
    x, y, z = torch.randn(8, 4), torch.randn(8, 2), torch.randn(8, 3)
    out, expected, ref = run_both(net, devices, (x, y), z=z, scale=0.5)
    torch.testing.assert_close(out, expected)
    assert_same_grads(net, ref)
    net = DictIn()
    out, expected, ref = run_both(net, devices, {"x": x, "bias": 2.0})
    torch.testing.assert_close(out, expected)
    assert_same_grads(net, ref)


def test_dict_namedtuple_and_dataclass_outputs():
    x = torch.randn(6, 4)
    out, expected, ref = run_both(
        StructOut("dict"), ["cpu"] * 3, x, loss=lambda o: o["logits"].sum() + o["aux"]["hidden"].sum()
    )
    torch.testing.assert_close(out["logits"], expected["logits"])
    torch.testing.assert_close(out["aux"]["hidden"], expected["aux"]["hidden"])
    # 0-dim outputs become one entry per replica; str leaves a list per replica; None stays None
    torch.testing.assert_close(
        out["aux"]["norm"], torch.stack([expected["logits"][i : i + 2].pow(2).sum() for i in (0, 2, 4)])
    )
    assert out["tag"] == ["ok"] * 3 and out["none"] is None
    net = StructOut("namedtuple")
    out, expected, ref = run_both(net, ["cpu"] * 2, x, loss=lambda o: o.logits.sum() + o.hidden.pow(2).sum())
    assert type(out) is Pair
    torch.testing.assert_close(out.hidden, expected.hidden)
    assert_same_grads(net, ref)
    net = StructOut("dataclass")
    out, expected, ref = run_both(net, ["cpu"] * 2, x, loss=lambda o: o.logits.sum())
    assert type(out) is Result and out.name == ["r", "r"] and out.scale == [2.0, 2.0]
    torch.testing.assert_close(out.logits, expected.logits)
    assert_same_grads(net, ref)


class LossModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = mlp()

    def forward(self, x, target):
        out = self.net(x)
        return {
            "loss": nn.functional.mse_loss(out, target, reduction="sum"),
            "stats": {"out": out, "abs": out.abs().sum()},
        }


def test_gather_layout_sum_loss_and_nested_keys_match_single_module():
    net = LossModel()
    x, t = torch.randn(7, 4), torch.randn(7, 3)
    layout = {"loss": "sum", "stats.abs": "mean", "stats.out": "concat"}
    out, expected, ref = run_both(net, ["cpu"] * 3, x, t, dp_kwargs={"gather_layout": layout}, loss=lambda o: o["loss"])
    assert out["loss"].dim() == 0
    torch.testing.assert_close(out["loss"], expected["loss"])  # sum of per-shard sums = full-batch sum
    torch.testing.assert_close(out["stats"]["out"], expected["stats"]["out"])
    assert_same_grads(net, ref)
    shard_abs = [expected["stats"]["out"][a:b].abs().sum() for a, b in ((0, 3), (3, 6), (6, 7))]
    torch.testing.assert_close(out["stats"]["abs"], torch.stack(shard_abs).mean())


def test_gather_layout_applies_with_one_device_too():
    net = LossModel()
    with DataParallel(net, ["cpu"], gather_layout={"loss": "mean", "stats": "skip"}) as dp:
        out = dp(torch.randn(4, 4), torch.randn(4, 3))
    assert out["loss"].dim() == 0 and isinstance(out["stats"], list) and len(out["stats"]) == 1


@pytest.mark.parametrize("sizes", [[1, 6], [5, 2], [2, 2, 3]], ids=str)
def test_chunk_sizes_uneven_shares_match_single_module(sizes):
    net = mlp()
    seen = []
    net[0].register_forward_hook(lambda m, inp, out: seen.append(inp[0].size(0)))
    out, expected, ref = run_both(net, ["cpu"] * len(sizes), torch.randn(7, 4), dp_kwargs={"chunk_sizes": sizes})
    torch.testing.assert_close(out, expected)
    assert_same_grads(net, ref)
    assert sorted(seen[: len(sizes)]) == sorted(sizes)


def test_batchnorm_running_stats_come_from_replica_0_only():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5))
    ref = clone(net)
    x = torch.randn(9, 4)
    with DataParallel(net, ["cpu"] * 3) as dp:
        out = dp(x)
    ref(x[:3])  # replica 0's shard: its running-stat update is what the original records
    torch.testing.assert_close(net[1].running_mean, ref[1].running_mean)
    torch.testing.assert_close(net[1].running_var, ref[1].running_var)
    assert net[1].num_batches_tracked.item() == 1
    # each replica normalises its own shard (train-mode BN uses batch statistics)
    ref2 = clone(net).train()
    torch.testing.assert_close(out[3:6], ref2(x[3:6]))


def test_forward_hooks_run_once_per_replica_and_attribute_changes_are_lost():
    class Counter(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 2)
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            return self.lin(x)

    net = Counter()
    hook_calls = []
    net.register_forward_hook(lambda m, i, o: hook_calls.append(i[0].shape[0]))
    with DataParallel(net, ["cpu"] * 3) as dp:
        dp(torch.randn(7, 4))
        assert sorted(hook_calls) == [1, 3, 3]
        dp(torch.randn(1, 4))  # tiny batch: only one replica runs
    assert len(hook_calls) == 4
    assert net.calls == 0  # as in torch: forward ran on replicas, not on the original


@pytest.mark.parametrize("devices", REPLICAS)
@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode])
def test_no_grad_gives_detached_outputs_equal_to_single_module(devices, mode):
    net = nn.Sequential(mlp(), nn.BatchNorm1d(3))
    ref = clone(net)
    x = torch.randn(6, 4)
    with mode(), DataParallel(net, devices) as dp:
        out = dp(x)
    assert not out.requires_grad
    with mode():
        ref(x[:2] if len(devices) == 3 else x[:3])  # replica 0's shard updates the running stats
    torch.testing.assert_close(net[1].running_mean, ref[1].running_mean)
    net.eval()
    ref.eval()
    with mode(), DataParallel(net, devices) as dp:
        torch.testing.assert_close(dp(x), ref(x))


def test_cpu_autocast_dtype_is_carried_into_replicas():
    net = mlp()
    x = torch.randn(6, 4)
    with DataParallel(net, ["cpu"] * 2) as dp:
        for dtype in (torch.bfloat16, torch.float16):
            with torch.autocast("cpu", dtype=dtype):
                out, expected = dp(x), net(x)
            assert out.dtype == expected.dtype == dtype
            torch.testing.assert_close(out, expected)


class Flaky(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 2)
        self.fail = True

    def forward(self, x):
        if self.fail and x[0, 0].item() > 100:
            raise RuntimeError("bad shard")
        return self.lin(x)


def test_exception_in_a_replica_then_instance_is_still_usable():
    net = Flaky()
    x = torch.randn(4, 4)
    x[2, 0] = 1000.0  # only replica 1 gets this row
    with DataParallel(net, ["cpu"] * 2) as dp:
        dp(torch.randn(4, 4))
        threads = threading.active_count()
        with pytest.raises(
            RuntimeError, match=r"^Caught RuntimeError in replica 1 on device cpu\.\nOriginal Traceback"
        ) as info:
            dp(x)
        assert 'raise RuntimeError("bad shard")' in str(info.value)
        net.fail = False
        torch.testing.assert_close(dp(x), net(x))
        assert threading.active_count() == threads


def test_worker_threads_persist_across_forwards_and_close_stops_them():
    net = mlp()
    dp = DataParallel(net, ["cpu"] * 3)
    before = threading.active_count()
    for _ in range(5):
        dp(torch.randn(6, 4)).sum().backward()
        assert threading.active_count() == before + 2
    workers = [t for t in threading.enumerate() if t.name.startswith("dpbench-replica")]
    assert workers and all(t.daemon for t in workers)
    dp.close()
    assert threading.active_count() == before
    dp(torch.randn(6, 4))  # starts fresh threads on demand
    with dp:
        pass
    assert threading.active_count() == before


def test_deepcopy_and_state_dict_like_torch():
    net = mlp()
    with DataParallel(net, ["cpu"] * 2) as dp:
        dp(torch.randn(4, 4))
        twin = copy.deepcopy(dp)
        x = torch.randn(4, 4)
        torch.testing.assert_close(twin(x), dp(x))
        twin.close()
    assert list(dp.state_dict()) == ["module." + k for k in net.state_dict()]


def test_record_phases_reports_every_phase():
    net = mlp()
    with DataParallel(net, ["cpu"] * 2, record_phases=True) as dp:
        dp(torch.randn(6, 4))
    assert set(dp.phase_times) == {Phase.SCATTER.value, Phase.REPLICATE.value, Phase.APPLY.value, Phase.GATHER.value}
    assert all(v >= 0 for v in dp.phase_times.values()) and dp.phase_times["apply"] > 0
    quiet = DataParallel(mlp(), ["cpu"] * 2)
    quiet(torch.randn(6, 4))
    assert quiet.phase_times == {}
    quiet.close()


def test_one_device_calls_the_module_directly():
    net = mlp()
    seen = []
    net.register_forward_hook(lambda m, i, o: seen.append(m))
    dp = DataParallel(net, ["cpu"])
    x = torch.randn(3, 4)
    torch.testing.assert_close(dp(x), net(x), rtol=0, atol=0)
    assert seen[0] is net  # no replica was made
    assert dp.device_ids == [torch.device("cpu")] and dp.output_device == torch.device("cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU default on a machine without CUDA")
def test_default_devices_without_cuda_is_cpu():
    assert DataParallel(mlp()).device_ids == [torch.device("cpu")]


def test_functional_data_parallel_matches_single_module():
    net = TwoInputs()
    ref = clone(net)
    x, y = torch.randn(5, 4), torch.randn(5, 2)
    out = data_parallel(net, ((x, y),), ["cpu"] * 2, output_device=-1, module_kwargs={"scale": 2.0})
    expected = ref((x, y), scale=2.0)
    torch.testing.assert_close(out, expected)
    out.sum().backward()
    expected.sum().backward()
    assert_same_grads(net, ref)


def test_training_steps_match_single_module():
    net = mlp()
    ref = clone(net)
    opt, ref_opt = torch.optim.SGD(net.parameters(), lr=0.1), torch.optim.SGD(ref.parameters(), lr=0.1)
    with DataParallel(net, ["cpu"] * 2) as dp:
        for step in range(3):
            g = torch.Generator().manual_seed(step)
            x, t = torch.randn(8, 4, generator=g), torch.randn(8, 3, generator=g)
            for model, optim in ((dp, opt), (ref, ref_opt)):
                optim.zero_grad()
                nn.functional.mse_loss(model(x), t).backward()
                optim.step()
    for p, q in zip(net.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"device_ids": []}, ValueError, r"device_ids: expected at least one device, got an empty list"),
        (
            {"device_ids": ["cpu", "gpu"]},
            ValueError,
            r"device_ids\[1\]: expected an int CUDA index, 'cuda:N' or 'cpu', got 'gpu'",
        ),
        (
            {"device_ids": ["cpu", "mps"]},
            ValueError,
            r"device_ids\[1\]: expected a device of type cpu or cuda, got 'mps'",
        ),
        ({"device_ids": "cpu"}, TypeError, r"device_ids: expected a list of devices, got a single device"),
        ({"device_ids": ["cpu", 1.5]}, TypeError, r"device_ids\[1\]: expected an int CUDA index.*got 1.5 \(float\)"),
        ({"device_ids": ["cpu"], "output_device": "gpu"}, ValueError, r"output_device: expected"),
        (
            {"device_ids": ["cpu"] * 2, "chunk_sizes": [1, 2, 3]},
            ValueError,
            r"chunk_sizes: expected one size per device \(2\)",
        ),
        (
            {"device_ids": ["cpu"] * 2, "chunk_sizes": [-1, 2]},
            ValueError,
            r"chunk_sizes\[0\]: expected a positive int, got -1",
        ),
        (
            {"device_ids": ["cpu"], "gather_layout": {"a": "avg"}},
            ValueError,
            r"gather_layout\['a'\]: expected one of concat",
        ),
        ({"device_ids": ["cpu"], "dim": "0"}, TypeError, r"dim: expected an int, got '0'"),
    ],
)
def test_bad_constructor_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        DataParallel(mlp(), **kwargs)


def test_bad_forward_inputs():
    with DataParallel(mlp(), ["cpu"] * 2, dim=2) as dp:
        with pytest.raises(
            ValueError, match=r"dim: expected a dimension in \[-2, 2\) for an input tensor of shape \(4, 4\), got 2"
        ):
            dp(torch.randn(4, 4))
    with DataParallel(mlp(), ["cpu"] * 2, chunk_sizes=[2, 3]) as dp:
        with pytest.raises(ValueError, match=r"chunk_sizes: expected sizes summing to the batch size 4"):
            dp(torch.randn(4, 4))


def test_module_on_the_wrong_device_gives_torchs_error():
    net = mlp().to("meta")  # a second device type that exists on every machine
    dp = DataParallel(net, ["cpu", "cpu"])
    with pytest.raises(
        RuntimeError,
        match=r"module must have its parameters and buffers on device cpu \(device_ids\[0\]\) but found "
        r"one of them on device: meta",
    ):
        dp(torch.randn(4, 4))
    with pytest.raises(RuntimeError, match=r"module must have its parameters and buffers on device cpu"):
        data_parallel(net, torch.randn(4, 4), ["cpu", "cpu"])


@pytest.mark.slow
def test_unclosed_instance_never_keeps_the_interpreter_alive():
    # Worker threads are daemons and the pool's finalizer stops them: a script that forgets
    # close() (and one that keeps the instance alive to the end) must still exit promptly.
    script = (
        "import torch, threading\n"
        "from dpbench.parallel import DataParallel\n"
        "dp = DataParallel(torch.nn.Linear(4, 2), ['cpu'] * 3)\n"
        "dp(torch.randn(6, 4)).sum().backward()\n"
        "assert sum(t.name.startswith('dpbench-replica') for t in threading.enumerate()) == 2\n"
        "print('done')\n"
    )
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "done"
