"""Suite 6 — communication microbenchmark: all_reduce and broadcast over the world's process
group, from 4 KiB up (the profile's sizes) and at the DDP bucket sizes of the profile's knob
workload, reporting time, algbw and busbw with the nccl-tests formulas."""
from __future__ import annotations

import pytest

from dpbench.comm import COLLECTIVES, collective_worker, ddp_bucket_sizes, summarize
from dpbench.schema import SCHEMA_VERSION


def _label(size: int) -> str:
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:g}{unit}"
    return f"{size}B"


def pytest_generate_tests(metafunc):
    if "size_bytes" not in metafunc.fixturenames:
        return
    profile = metafunc.config._dpbench_profile
    params = [pytest.param(s, "sweep", id=_label(s)) for s in profile.comm_sizes]
    try:
        import dpbench

        model = dpbench.get_workload(profile.knob_workload).model()
        buckets = sorted(set(ddp_bucket_sizes(model)))
        params += [pytest.param(s, "ddp-bucket", id=f"bucket-{_label(s)}") for s in buckets]
    except Exception as exc:  # no model, no bucket sizes: the sweep still runs; say why in the output
        print(f"dpbench: no DDP bucket sizes for {profile.knob_workload!r}: {exc}")
    metafunc.parametrize(("size_bytes", "source"), params)
    metafunc.parametrize("collective", COLLECTIVES)


@pytest.fixture(scope="module")
def pool(profile):
    world = max(profile.world_sizes)
    if world < 2:
        pytest.skip("the communication benchmark needs a world size of at least 2 (see DPBENCH_WORLD_SIZES)")
    from dpbench.launcher import WorkerPool

    with WorkerPool(world, device=profile.device, timeout=120.0) as workers:
        yield workers


def test_collective(benchmark, pool, profile, collective, size_bytes, source):
    benchmark.group = f"comm-{collective}"
    rounds: list[list[list[float]]] = []

    def one_round():
        rounds.append(pool.run(collective_worker, collective, size_bytes, profile.comm_iters))

    benchmark.pedantic(one_round, rounds=profile.rounds, warmup_rounds=1, iterations=1)
    # The first call is pytest-benchmark's warm-up round (none with --benchmark-disable: one call).
    measured = rounds[1:] or rounds
    per_rank = [sum((r[rank] for r in measured), []) for rank in range(len(measured[0]))]
    result = summarize(collective, size_bytes, per_rank)
    info = pool.info if hasattr(pool, "info") else {}
    benchmark.extra_info.update({
        "schema": SCHEMA_VERSION,
        "kind": "collective",
        "suite": "comm",
        "profile": profile.name.value,
        "collective": collective,
        "size_bytes": size_bytes,
        "size_source": source,
        "dtype": "float32",
        "world_size": result.world_size,
        "device_type": profile.device,
        "backend": info.get("backend"),
        "threads_per_worker": info.get("threads_per_worker"),
        "seed": None,
        "iters_per_round": profile.comm_iters,
        "time_s": result.time_s,
        "algbw_gbps": result.algbw_gbps,
        "busbw_gbps": result.busbw_gbps,
    })
    assert result.time_s > 0
