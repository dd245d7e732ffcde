"""GPU energy from NVML's total-energy counter, against a fake NVML whose counter the test scripts:
the counter's difference over the window (never power × time), a wrap undone, a reset, a stall or a
window too short for the counter said as absent with its reason — never 0 J — and the window a GPU's
readings need, from the sampler's interval and NVML's periods."""

from __future__ import annotations

import math
import time

import pytest

from dpbench.sampler import ResourceSampler
from dpbench.sampler.cpu import CpuBackend
from dpbench.sampler.energy import (
    COUNTER_MODULUS,
    EnergyCounter,
    min_energy_window_s,
    min_gpu_window_s,
    window_energy,
)
from dpbench.sampler.gpus import probe_gpus, resolve_devices
from dpbench.sampler.nvml import NvmlBackend
from dpbench.sampler.timeline import build_frame, summarize_devices
from dpbench.schema import EnergyGap

from .fake_nvml import FakeGpu, FakeNvml

EVERY = 0.25  # the sampler's interval without a spare core (SHARED_CORE_MIN_INTERVAL)


def _recorded(counter_mj: list[int], *, unsupported: set = frozenset()):
    """The cuda:0 summary of a recording whose counter reads ``counter_mj``: the first at open(), then
    one per sample, a sample every EVERY seconds (the backend driven by hand: no thread, exact times)."""
    gpu = FakeGpu("GPU-aa11-0000", "00000000:3B:00.0", energy_seq=list(counter_mj), unsupported=set(unsupported))
    fake = FakeNvml([gpu])
    errors: list[str] = []
    backend = NvmlBackend(
        fake, resolve_devices(None, probe_gpus(fake, {})), CpuBackend((), errors.append), errors.append
    )
    backend.open()
    rows: list = []
    for i in range(len(counter_mj) - 1):
        backend.sample(i * EVERY, rows)
    static = backend.describe()
    backend.close()
    frame = build_frame([r for r in rows if r[1] == "cuda:0"])
    resets = [label for label, info in static.items() if info.get("energy_reset")]
    assert errors == []
    return frame, summarize_devices(frame, energy_resets=resets)["cuda:0"], static["cuda:0"]


def test_the_window_a_gpu_needs_follows_the_interval_and_nvmls_periods():
    # 2 s: five utilization readings whose 1 s period lies inside the window, at the shared-core 0.25 s
    # (1 + 4 × 0.25), and 20 of the energy counter's 100 ms updates; a slower sampler needs longer.
    assert min_energy_window_s() == 2.0
    assert min_gpu_window_s(0.25) == 2.0
    assert min_gpu_window_s(0.05) == 2.0  # the counter's 20 updates still rule
    assert min_gpu_window_s(0.5) == 3.0
    with pytest.raises(ValueError, match="interval: expected a positive number of seconds, found 0"):
        min_gpu_window_s(0)


def test_energy_is_the_counters_difference_over_the_window():
    # 100 W: 25 J each 0.25 s, 13 samples over 3 s (the base read at open() is the 0.0 of the timeline).
    counter = [7_000_000 + 25_000 * i for i in range(14)]
    frame, info, _ = _recorded(counter)
    assert list(frame.energy_j) == [25.0 * i for i in range(1, 14)]
    assert info["energy_j"] == 300.0  # the last reading less the first sampled one (12 steps)
    assert info["energy_window_s"] == 3.0 and info["energy_absent"] is None and info["energy_held_s"] == 0.0


def test_a_counter_that_wraps_past_2_to_the_64_is_undone_not_read_as_a_huge_negative():
    top = COUNTER_MODULUS
    counter = [top - 60_000 + 25_000 * i for i in range(14)]
    counter = [c % top for c in counter]  # the third sample's read wraps to 15_000
    assert counter[3] < counter[2]
    frame, info, static = _recorded(counter)
    assert list(frame.energy_j) == [25.0 * i for i in range(1, 14)]  # monotone across the wrap
    assert info["energy_j"] == 300.0 and info["energy_absent"] is None
    assert static["energy_reset"] is None


def test_a_counter_that_goes_back_is_a_reset_and_absent_never_a_number():
    counter = [9_000_000_000 + 25_000 * i for i in range(8)] + [1_000 + 25_000 * i for i in range(6)]
    frame, info, static = _recorded(counter)
    assert info["energy_j"] is None and info["energy_absent"] == EnergyGap.RESET.value
    assert static["energy_reset"] == {"at_s": 1.75, "from_mj": 9_000_175_000.0, "to_mj": 1_000.0}
    assert frame.energy_j.iloc[:7].notna().all() and frame.energy_j.iloc[7:].isna().all()  # nothing after it


def test_a_counter_jumping_further_than_any_board_draws_is_a_reset_too():
    counter = [1_000_000 + 25_000 * i for i in range(6)] + [10**12 + 25_000 * i for i in range(8)]
    _, info, static = _recorded(counter)
    assert info["energy_absent"] == EnergyGap.RESET.value and static["energy_reset"]["to_mj"] == 1e12


def test_a_stalled_counter_over_a_long_window_is_absent_with_the_reason_not_zero_joules():
    _, info, _ = _recorded([5_000_000] * 14)
    assert info["energy_j"] is None and info["energy_absent"] == EnergyGap.STALLED.value
    assert info["energy_held_s"] == 3.0


def test_a_counter_that_stands_still_for_a_second_inside_the_window_is_stalled():
    moving = [5_000_000 + 25_000 * i for i in range(8)]
    _, info, _ = _recorded(moving + [moving[-1]] * 6)  # held from 1.5 s to 3.0 s
    assert info["energy_absent"] == EnergyGap.STALLED.value and info["energy_held_s"] == 1.5


def test_a_window_shorter_than_the_counter_needs_is_absent_even_when_the_counter_moved():
    _, info, _ = _recorded([5_000_000 + 25_000 * i for i in range(6)])  # 1.0 s of samples
    assert info["energy_j"] is None and info["energy_absent"] == EnergyGap.SHORT_WINDOW.value
    assert info["energy_window_s"] == 1.0


def test_a_gpu_without_a_counter_is_absent_with_the_reason():
    _, info, _ = _recorded([0] * 14, unsupported={"nvmlDeviceGetTotalEnergyConsumption"})
    assert info["energy_j"] is None and info["energy_absent"] == EnergyGap.NO_COUNTER.value
    assert info["energy_window_s"] is None


def test_the_counter_bound_lets_one_update_lump_through_after_a_short_gap():
    counter = EnergyCounter()
    assert counter.read(1_000_000, 0.0) == 0.0
    # 1 ms after the last reading the counter moved by a whole 100 ms update at 700 W: energy, not a reset.
    assert counter.read(1_070_000, 0.001) == 70.0
    assert counter.reset is None


def test_window_energy_reads_nan_as_not_read():
    out = window_energy([0.0, 1.0, 2.0, 3.0], [0.0, math.nan, 50.0, 75.0])
    assert out == {"energy_j": 75.0, "energy_window_s": 3.0, "energy_absent": None, "energy_held_s": 0.0}


def test_the_cpu_backend_judges_no_gpu_window():
    with ResourceSampler(0.02, backend="cpu") as sampler:
        time.sleep(0.05)
    assert sampler.summary()["gpu_window"] is None
