"""Suite 6 — communication microbenchmark: all_reduce and broadcast over the world's process
group, from 4 KiB up (the profile's sizes) and at the DDP bucket sizes of the profile's knob
workload, reporting time, algbw and busbw with the nccl-tests formulas. Like every case, each
collective is measured in fresh-process trials; the time per call is the workers' own."""

from __future__ import annotations

import pytest

from dpbench.measure import CollectiveCase, measure_collective
from dpbench.measure.collectives import COLLECTIVES, ddp_bucket_sizes
from dpbench.measure.plugin import session_of


def _label(size: int) -> str:
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:g}{unit}"
    return f"{size}B"


def pytest_generate_tests(metafunc):
    if "case" not in metafunc.fixturenames:
        return
    profile = session_of(metafunc.config).profile
    world = max(profile.world_sizes)
    sizes = [(s, "sweep", _label(s)) for s in profile.comm_sizes]
    try:
        model = profile.workload(profile.knob_workload).model()
        sizes += [(s, "ddp-bucket", f"bucket-{_label(s)}") for s in sorted(set(ddp_bucket_sizes(model)))]
    except Exception as exc:  # no model, no bucket sizes: the sweep still runs; say why in the output
        print(f"dpbench: no DDP bucket sizes for {profile.knob_workload!r}: {exc}")
    skip = pytest.mark.skip(
        reason="the communication benchmark needs a world size of at least 2 (see DPBENCH_WORLD_SIZES)"
    )
    params = [
        pytest.param(
            CollectiveCase(collective=c, size_bytes=s, world_size=world, source=source),
            id=f"{label}-{c}",
            marks=[skip] if world < 2 else [],
        )
        for s, source, label in sizes
        for c in COLLECTIVES
    ]
    metafunc.parametrize("case", params)


def test_collective(benchmark, case, profile, trials):
    benchmark.group = f"comm-{case.collective}"
    info = measure_collective(benchmark, case, session=trials, profile=profile)
    assert info["time_s"] > 0
