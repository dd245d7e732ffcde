"""Will it fit? ``dpbench.launch`` compares the estimate with the device's memory before any process starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import dpbench
from dpbench.launcher import fit
from dpbench.launcher.fit import DoesNotFit, check_fits
from dpbench.strategies import StrategyUnavailable, get_strategy
from dpbench.strategies.estimate import Estimator
from tests.sampler.fake_nvml import FakeGpu, FakeNvml

ROOT = Path(__file__).resolve().parents[2]


def _no_pool(*args, **kwargs):
    raise AssertionError("a worker pool was started")


def test_a_case_over_the_given_memory_is_refused_before_any_process_starts(monkeypatch):
    monkeypatch.setenv(fit.ENV_DEVICE_MEMORY, "10MB")
    monkeypatch.delenv(fit.ENV_IGNORE, raising=False)
    monkeypatch.setattr("dpbench.launcher.run.make_pool", _no_pool)
    with pytest.raises(DoesNotFit) as caught:
        dpbench.launch("ddp", "mlp", world_size=2, global_batch=8, optimizer="adamw")
    assert isinstance(caught.value, StrategyUnavailable)  # the suites turn it into a skip
    state = Estimator("mlp", activations=False).case(
        "ddp", world_size=2, global_batch=8, options={"optimizer": "adamw"}
    )
    need = 2 * state.need_bytes()  # two CPU ranks share the host's memory
    assert str(caught.value) == (
        f"ddp w2 needs ~{state.need_bytes() / 2**30:.3g} GiB per rank (params 0.0109, grads 0.0109, "
        f"adamw 0.0217, buffers 0.0109 GiB) × 2 workers sharing cpu: ~{need / 2**30:.3g} GiB, the device has "
        "0.00931 GiB (DPBENCH_DEVICE_MEMORY=10MB); set DPBENCH_IGNORE_MEMORY_ESTIMATE=1 "
        "(--dpbench-ignore-memory-estimate) to run it anyway"
    )


def test_the_peak_estimate_says_beyond_grads_for_what_a_step_holds_beyond_the_gradients():
    """The forward + backward's peak beyond the gradients read as activations under that name: it
    is named as the estimate's table names it."""
    from types import SimpleNamespace

    from dpbench.strategies.estimate import RankEstimate

    mib = 2**20
    rank = RankEstimate(
        rank=0, params_bytes=64 * mib, grads_bytes=64 * mib, optimizer_state_bytes=0, comm_buffer_bytes=0,
        activation_bytes=32 * mib, peak_bytes=160 * mib,
    )  # fmt: skip
    case = SimpleNamespace(strategy="ddp", world_size=2, optimizer="sgd")
    line = fit._reason(case, [rank], 160 * mib, 128 * mib, "DPBENCH_DEVICE_MEMORY=128MiB", "cpu", 0, None)
    assert line.startswith(
        "ddp w2 needs ~0.156 GiB per rank (params 0.0625, grads 0.0625, sgd 0, beyond grads 0.0312 GiB): ~0.156 GiB"
    )


def test_the_state_estimate_fits_when_the_memory_suffices_and_the_ignore_switch_skips_the_check():
    ddp = get_strategy("ddp")
    options = ddp.parse_options({"optimizer": "sgd"}, device="cpu", world_size=2, global_batch=8)
    kwargs = dict(world_size=2, global_batch=8, device="cpu", devices=("cpu", "cpu"), processes=2, options=options)
    workload = Estimator("mlp").workload
    state = Estimator("mlp", activations=False).case("ddp", world_size=2, global_batch=8).need_bytes()
    fits = check_fits(ddp, workload, environ={fit.ENV_DEVICE_MEMORY: str(2 * state)}, **kwargs)
    assert fits["need_bytes"] == state and fits["ranks"][0]["peak_bytes"] is None
    with pytest.raises(DoesNotFit):
        check_fits(ddp, workload, environ={fit.ENV_DEVICE_MEMORY: str(2 * state - 1)}, **kwargs)
    assert check_fits(ddp, workload, environ={fit.ENV_DEVICE_MEMORY: "1", fit.ENV_IGNORE: "1"}, **kwargs) is None
    with pytest.raises(ValueError, match="DPBENCH_MEMORY_ESTIMATE: expected one of state, peak, found 'all'"):
        check_fits(ddp, workload, environ={fit.ENV_MODE: "all"}, **kwargs)


def test_gpu_memory_is_read_through_nvml_or_not_at_all():
    # On a machine without NVML or GPUs there is nothing to compare with: no limit, no CUDA initialised.
    free = fit.free_memory("cuda", ("cuda:0",), {})
    if not free:
        pytest.skip("no GPU visible to NVML here")
    ((limit, where),) = free.values()
    assert limit > 0 and where == "free (NVML)"


@pytest.mark.slow
def test_the_suites_skip_a_case_that_does_not_fit_with_the_reason(tmp_path):
    env = {
        **os.environ,
        "DPBENCH_PROFILE": "quick",
        "DPBENCH_WORKLOADS": "mlp",
        "DPBENCH_WORLD_SIZES": "2",
        "DPBENCH_TRIALS": "1",
    }
    env.pop(fit.ENV_MODE, None)
    command = [
        sys.executable, "-m", "pytest", str(ROOT / "suites" / "test_throughput.py"), "-q", "-rs",
        "-p", "no:cacheprovider", "--benchmark-disable", "--dpbench-strategies", "ddp",
        "--dpbench-device-memory", "20MB", "-k", "mlp",
    ]  # fmt: skip
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert "SKIPPED" in done.stdout and "ddp w2 needs ~" in done.stdout, done.stdout[-3000:]
    assert "the device has 0.0186 GiB (DPBENCH_DEVICE_MEMORY=20MB)" in done.stdout
    assert "passed" not in done.stdout.splitlines()[-1]


class _Gpu(FakeGpu):
    capability = (9, 0)


class _Nvml(FakeNvml):
    """The fake NVML, with each GPU's compute capability (what the workspaces depend on)."""

    def nvmlDeviceGetCudaComputeCapability(self, gpu):
        self._enter("capability")
        return gpu.capability


def _two_gpus(free: int) -> _Nvml:
    """Two H100-like GPUs with ``free`` bytes free each (NVML's v1 free = total - used - reserved)."""
    return _Nvml([_Gpu(f"GPU-{i}{i}-0000", f"00000000:{i + 1}A:00.0", used=0, reserved=0, total=free) for i in (0, 1)])


def _ddp_on_two_gpus(**kwargs):
    ddp = get_strategy("ddp")
    options = ddp.parse_options({"optimizer": "sgd"}, device="cpu", world_size=2, global_batch=8)
    return check_fits(
        ddp, Estimator("mlp").workload, world_size=2, global_batch=8, device="cuda", devices=("cuda:0", "cuda:1"),
        processes=2, options=options, backend="nccl", **kwargs,
    )  # fmt: skip


def test_a_gpu_with_room_for_the_estimate_but_not_the_headroom_is_refused_naming_it():
    state = Estimator("mlp", activations=False).case("ddp", world_size=2, global_batch=8).need_bytes()
    need = state + 2 * (32 + 1) * 2**20  # ddp's state and two handles' cuBLAS + cuBLASLt workspaces on sm90
    with pytest.raises(DoesNotFit) as caught:
        _ddp_on_two_gpus(environ={}, nvml=_two_gpus(need + 2**20))
    headroom = fit.CUDA_HEADROOM.bytes(need, processes=1, nccl=True)
    assert headroom == 2**29 + 2**30 + int(0.1 * need)
    assert str(caught.value) == (
        f"ddp w2 needs ~{need / 2**30:.3g} GiB per rank (params 0.0109, grads 0.0109, sgd 0, buffers 0.0109, "
        f"CUDA workspaces 0.0645 GiB): ~{need / 2**30:.3g} GiB + headroom ~{headroom / 2**30:.3g} GiB (CUDA context "
        f"0.5 GiB x 1 process, NCCL buffers 1 GiB, fragmentation 10% of the estimate), the device has "
        f"{(need + 2**20) / 2**30:.3g} GiB (free (NVML)); set DPBENCH_IGNORE_MEMORY_ESTIMATE=1 "
        "(--dpbench-ignore-memory-estimate) to run it anyway"
    )


def test_a_gpu_with_room_for_the_estimate_and_the_headroom_is_accepted():
    state = Estimator("mlp", activations=False).case("ddp", world_size=2, global_batch=8).need_bytes()
    need = state + 2 * (32 + 1) * 2**20
    room = fit.CUDA_HEADROOM.bytes(need, processes=1, nccl=True)
    fits = _ddp_on_two_gpus(environ={}, nvml=_two_gpus(need + room))
    assert fits["need_bytes"] == need and fits["cuda_workspaces"]["capability"] == [9, 0]
    assert [r["workspace_bytes"] for r in fits["ranks"]] == [2 * (32 + 1) * 2**20] * 2
    with pytest.raises(DoesNotFit):  # one byte less
        _ddp_on_two_gpus(environ={}, nvml=_two_gpus(need + room - 1))


def test_the_headroom_is_stated_and_grows_with_the_processes_on_a_device():
    room = fit.Headroom(context_bytes=100, nccl_bytes=1000, fragmentation=0.5)
    assert room.bytes(10, processes=2, nccl=False) == 205 and room.bytes(10, processes=1, nccl=True) == 1105
    assert room.describe(processes=2, nccl=False) == (
        "CUDA context 9.31e-08 GiB x 2 processes, fragmentation 50% of the estimate"
    )


def test_gpu_memory_and_capability_are_read_with_nvml_initialised_and_left_shut_down():
    # probe_gpus shuts NVML down when it returns: the handles are read inside a pair of our own.
    nvml = _two_gpus(5 * 2**30)
    nvml.gpus[1].capability = (8, 0)
    assert fit.free_memory("cuda", ("cuda:0", "cuda:1"), {}, nvml=nvml) == {
        "cuda:0": (5 * 2**30, "free (NVML)"),
        "cuda:1": (5 * 2**30, "free (NVML)"),
    }
    assert fit.gpu_capability(("cuda:1",), {}, nvml=nvml) == (8, 0)
    assert fit.gpu_capability(("cuda:0", "cuda:1"), {}, nvml=nvml) == (9, 0)  # the larger workspaces
    assert nvml.refs == 0
    assert fit.gpu_capability(("cuda:0",), {}, nvml=FakeNvml([], init_error=9)) is None  # no driver
