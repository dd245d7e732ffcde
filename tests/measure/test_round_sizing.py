"""How many steps a timed round takes (dpbench.measure.cases.steps_for_trial), with a fake CUDA device
(``device_type="cuda"``) and fake step times: on a GPU the timed rounds together last the window NVML's
readings need — 2 s at the sampler's shared-core 0.25 s, 2.5 s with the margin — where the profile's
20- or 50-step cap timed 0.01–0.15 s a round; on CPU the sizing is as it was."""

from __future__ import annotations

import math

import pytest

from dpbench.measure import resolve_profile, steps_for_round, steps_for_trial
from dpbench.measure.cases import GPU_MAX_STEPS_PER_ROUND, GPU_WINDOW_MARGIN
from dpbench.sampler.energy import min_gpu_window_s

FULL = resolve_profile(cuda_count=1, cpu_count=16, environ={})
QUICK = resolve_profile(cuda_count=1, cpu_count=16, environ={"DPBENCH_PROFILE": "quick"})
WINDOW = GPU_WINDOW_MARGIN * min_gpu_window_s(0.25)


def _cuda(step_s: float, profile, warm_s: float | None = None) -> int:
    return steps_for_trial(probe_s=step_s, warm_s=warm_s, profile=profile, device_type="cuda")


def test_the_profiles_step_cap_made_gpu_windows_too_short_for_nvml():
    # What the cap gave a 0.5 ms GPU step: 50 steps × 5 rounds = 0.125 s of samples, 0–1 NVML readings.
    capped = steps_for_round(0.0005, FULL.target_round_s, FULL.max_steps_per_round)
    assert capped == 50 and capped * FULL.rounds * 0.0005 < min_gpu_window_s(0.25)


@pytest.mark.parametrize(
    "profile, step_s, steps",
    [
        (FULL, 0.0005, 1000),  # 5 rounds of 0.5 s: the profile's own round length already fills 2.5 s
        (FULL, 0.003, 167),
        (QUICK, 0.0005, 2500),  # 2 rounds: each 1.25 s, not the quick profile's 0.2 s
        (QUICK, 0.003, 417),
    ],
)
def test_on_a_gpu_the_timed_rounds_fill_the_window_nvml_needs(profile, step_s, steps):
    assert WINDOW == 2.5
    k = _cuda(step_s, profile)
    assert k == steps
    assert k * step_s * profile.rounds >= WINDOW - step_s * profile.rounds  # the window, to a step a round
    assert k > profile.max_steps_per_round  # the CPU cap no longer applies


def test_a_gpu_round_is_sized_from_the_fastest_step_seen_before_it():
    # The probe's steps pay for cuDNN autotuning and cuBLAS handles: the warm-up's 0.5 ms step sizes it.
    assert _cuda(0.003, QUICK, warm_s=0.0005) == 2500
    assert _cuda(0.0005, QUICK, warm_s=0.003) == 2500


def test_a_gpu_step_slower_than_the_window_takes_one_step_a_round_and_nonsense_is_bounded():
    assert _cuda(5.0, QUICK) == 1
    assert _cuda(1e-9, QUICK) == GPU_MAX_STEPS_PER_ROUND
    assert _cuda(math.nan, QUICK) == 1


def test_on_cpu_the_sizing_is_the_profiles_from_the_probe_alone():
    cpu = resolve_profile(cuda_count=0, cpu_count=2, environ={})
    for probe, warm in ((0.0005, None), (0.0005, 0.0001), (0.05, 0.001)):
        expected = steps_for_round(probe, cpu.target_round_s, cpu.max_steps_per_round)
        assert steps_for_trial(probe_s=probe, warm_s=warm, profile=cpu, device_type="cpu") == expected
    assert steps_for_trial(probe_s=0.05, warm_s=0.001, profile=cpu, device_type="cpu") == 4
