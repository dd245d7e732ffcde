"""dpbench.measure.extra_info and dpbench.measure.collectives pieces that need no worker processes."""

from __future__ import annotations

import statistics

import pytest
from torch import nn

from dpbench.launcher.step_stats import StepStats, merge_step_stats
from dpbench.measure import TrainingCase, resolve_profile, steps_for_round
from dpbench.measure.collectives import bus_bandwidth_factor, ddp_bucket_sizes, default_sizes, summarize
from dpbench.schema import Profile
from dpbench.stats import percentile


def test_quick_is_the_default_without_cuda_and_full_with_it():
    assert resolve_profile(cuda_count=0, cpu_count=2, environ={}).name is Profile.QUICK
    full = resolve_profile(cuda_count=4, cpu_count=16, environ={})
    assert full.name is Profile.FULL and full.device == "cuda" and full.world_sizes == (1, 2, 3, 4)


def test_quick_world_sizes_follow_the_core_count():
    assert resolve_profile(cuda_count=0, cpu_count=2, environ={}).world_sizes == (1, 2)
    assert resolve_profile(cuda_count=0, cpu_count=64, environ={}).world_sizes == (1, 2, 3, 4)


def test_environment_overrides():
    env = {
        "DPBENCH_PROFILE": "full",
        "DPBENCH_DEVICE": "cpu",
        "DPBENCH_WORLD_SIZES": "1,3",
        "DPBENCH_WORKLOADS": "lenet, mlp",
    }
    cfg = resolve_profile(cuda_count=0, cpu_count=2, environ=env)
    assert (cfg.name, cfg.device, cfg.world_sizes, cfg.workloads) == (Profile.FULL, "cpu", (1, 3), ("lenet", "mlp"))
    assert cfg.knob_workload == "lenet"


@pytest.mark.parametrize(
    "env, needle",
    [
        ({"DPBENCH_PROFILE": "fast"}, "DPBENCH_PROFILE"),
        ({"DPBENCH_DEVICE": "tpu"}, "DPBENCH_DEVICE"),
        ({"DPBENCH_DEVICE": "cuda"}, "no CUDA device"),
        ({"DPBENCH_WORLD_SIZES": "1,x"}, "DPBENCH_WORLD_SIZES"),
        ({"DPBENCH_WORLD_SIZES": "0"}, "DPBENCH_WORLD_SIZES"),
    ],
)
def test_bad_environment_is_a_clear_error(env, needle):
    with pytest.raises(ValueError, match=needle):
        resolve_profile(cuda_count=0, cpu_count=2, environ=env)


def test_case_ids_are_readable():
    case = TrainingCase(strategy="ddp", workload="mlp", world_size=2, global_batch=64, options={"bucket_cap_mb": 5})
    assert case.id == "ddp-mlp-w2-bucket_cap_mb=5"


def test_steps_for_round():
    assert steps_for_round(0.01, 0.25, 100) == 25
    assert steps_for_round(1.0, 0.25, 100) == 1
    assert steps_for_round(1e-6, 0.25, 20) == 20
    assert steps_for_round(float("nan"), 0.25, 20) == 1


def test_merge_step_stats_weights_phases_by_steps_and_keeps_peaks():
    a = StepStats(
        step_times=[1.0, 1.0],
        global_batch=8,
        phases={"compute": 0.5},
        peak_memory_bytes={"cpu:rank0": 10},
        minor_faults=30,
    )
    b = StepStats(
        step_times=[2.0],
        global_batch=8,
        phases={"compute": 2.0, "communication": 0.3},
        peak_memory_bytes={"cpu:rank0": 7, "cpu:rank1": 9},
        losses=[0.1],
        minor_faults=4,
    )
    merged = merge_step_stats([a, b])
    assert merged.minor_faults == 34 and merged.minor_faults_per_step == 34 / 3  # every fault, per step of all rounds
    assert a.to_dict()["minor_faults_per_step"] == 15.0
    assert merged.step_times == [1.0, 1.0, 2.0]
    assert merged.phases["compute"] == pytest.approx((0.5 * 2 + 2.0) / 3)
    assert merged.phases["communication"] == pytest.approx(0.3 / 3)
    assert merged.peak_memory_bytes == {"cpu:rank0": 10, "cpu:rank1": 9}
    assert merged.samples_per_s == pytest.approx(24 / 4.0)
    with pytest.raises(ValueError):
        merge_step_stats([])


def test_percentile_matches_statistics_quantiles():
    values = [3.0, 1.0, 4.0, 1.5, 9.0, 2.6, 5.3]
    assert percentile(values, 50) == statistics.median(values)
    assert percentile(values, 95) == pytest.approx(statistics.quantiles(values, n=20, method="inclusive")[-1])


def test_bus_bandwidth_factors_follow_nccl_tests():
    assert bus_bandwidth_factor("all_reduce", 2) == 1.0
    assert bus_bandwidth_factor("all_reduce", 8) == pytest.approx(1.75)
    assert bus_bandwidth_factor("broadcast", 8) == 1.0
    with pytest.raises(ValueError, match="collective"):
        bus_bandwidth_factor("all_gather", 2)


def test_summarize_takes_the_slowest_rank_per_call():
    result = summarize("all_reduce", 4_000_000, [[0.001, 0.004, 0.002], [0.003, 0.001, 0.002]])
    assert result.times == [0.003, 0.004, 0.002]
    assert result.time_s == 0.003
    assert result.algbw_gbps == pytest.approx(4_000_000 / 0.003 / 1e9)
    assert result.busbw_gbps == pytest.approx(result.algbw_gbps * 1.0)
    with pytest.raises(ValueError):
        summarize("all_reduce", 4, [[0.1], [0.1, 0.2]])


def test_default_sizes_span_4k_to_256m():
    sizes = default_sizes()
    assert sizes[0] == 4096 and sizes[-1] == 256 << 20
    assert all(b == a * 4 for a, b in zip(sizes, sizes[1:]))
    with pytest.raises(ValueError):
        default_sizes(max_bytes=1, min_bytes=4)


def test_ddp_bucket_sizes_fill_in_reverse_order_with_a_small_first_bucket():
    # 4 layers of 512x512 floats (1 MiB weight + 2 KiB bias each), registration order w0,b0,…,w3,b3.
    model = nn.Sequential(*[nn.Linear(512, 512) for _ in range(4)])
    total = sum(p.numel() * 4 for p in model.parameters())
    sizes = ddp_bucket_sizes(model, bucket_cap_mb=2.0, first_bucket_mb=1.0)
    assert sum(sizes) == total
    # Reverse order is b3, w3, b2, w2, …: b3 alone fits the 1 MiB first bucket (adding w3 would
    # not); after that each 2 MiB bucket takes one weight plus the next bias (two weights overflow).
    w, b = 512 * 512 * 4, 512 * 4
    assert sizes == [b, w + b, w + b, w + b, w]


def test_strategy_cases_cover_every_strategy_and_world_size_with_single_at_one():
    from dpbench.measure import strategy_cases
    from dpbench.schema import StrategyName

    cases = strategy_cases(("mlp", "lenet"), (1, 2, 4), lambda size: 32 * size)
    assert cases[0].strategy == "single"  # the baseline comes first
    by_key = {(c.workload, c.strategy, c.world_size): c for c in cases}
    assert len(by_key) == len(cases) == 2 * (1 + 3 * (len(StrategyName) - 1))
    assert not any(c.strategy == "single" and c.world_size != 1 for c in cases)
    assert by_key[("lenet", "ddp", 4)].global_batch == 128


def test_unknown_workload_names_are_refused_in_one_line_listing_the_known_ones():
    with pytest.raises(ValueError) as info:
        resolve_profile(cuda_count=0, cpu_count=2, environ={"DPBENCH_WORKLOADS": "mlp, mpl,lenett"})
    assert str(info.value) == (
        "DPBENCH_WORKLOADS: Unknown workload 'mpl'. Available names: dict_model, lenet, mlp, resnet18, transformer "
        "(did you mean 'mlp'?); other specs: MODULE:ATTR, path/to/file.py:ATTR, hf:MODEL_TYPE, hf:PATH"
    )


@pytest.mark.parametrize("profile", ["quick", "full"])
def test_one_gpu_measures_two_ranks_sharing_it(profile):
    one = resolve_profile(profile, cuda_count=1, cpu_count=16, environ={})
    assert one.device == "cuda" and one.world_sizes == (1, 2)  # not 1 alone: nothing parallel would run
    assert resolve_profile(profile, cuda_count=4, cpu_count=16, environ={}).world_sizes == (1, 2, 3, 4)


def test_a_case_holds_its_options_typed_once_and_its_key_resolves_them_on_cpu(monkeypatch):
    from dpbench.strategies._options import CommonOptions

    case = TrainingCase(strategy="ddp", workload="mlp", world_size=2, global_batch=64, options={"static_graph": False})
    assert isinstance(case.configuration.typed, CommonOptions) and case.configuration.typed.static_graph is False
    assert (
        case.key == TrainingCase(strategy="ddp", workload="mlp", world_size=2, global_batch=64).key
    )  # False: the default
    # fp16 cannot run on a CPU: the case is identified by the options asked for, as every saved case_key was.
    fp16 = TrainingCase(strategy="single", workload="mlp", world_size=1, global_batch=64, options={"precision": "fp16"})
    assert fp16.key == '["training", "single", "mlp", 1, 64, {"precision": "\'fp16\'"}]'
    # An option the strategy does not have: no dataclass; launch names it.
    assert (
        TrainingCase(strategy="ddp", workload="mlp", world_size=2, global_batch=64, options={"x": 1}).configuration
        == "ddp"
    )
    # Once per case, not on every access: the session reads the key many times.
    checks = []
    monkeypatch.setattr(type(case.configuration.typed), "check", lambda self, **kw: checks.append(kw))
    again = TrainingCase(strategy="ddp", workload="mlp", world_size=2, global_batch=64, options={"bucket_cap_mb": 100})
    assert again.key == again.key == again.key and len(checks) == 1
