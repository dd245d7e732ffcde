"""Pinning on a big GPU node: whole physical cores per rank (no SMT sibling of another rank's) on
its GPU's NUMA node, planned from a fake topology and a fake NVML."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dpbench.workers.affinity import CpuTopology, gpu_local_cpus, parse_cpulist, plan_affinity, read_topology
from tests.sampler.fake_nvml import FakeGpu, FakeNvml

# A DGX-style 2 sockets x 56 cores x 2 threads: every core's first thread is numbered before any
# second thread (0-55 socket 0, 56-111 socket 1, 112-167 and 168-223 their siblings).
DGX = CpuTopology.from_siblings((c, c + 112) for c in range(112))
SOCKET = {
    0: frozenset(range(0, 56)) | frozenset(range(112, 168)),
    1: frozenset(range(56, 112)) | frozenset(range(168, 224)),
}
GPU_SOCKET = [0, 0, 0, 0, 1, 1, 1, 1]  # GPUs 0-3 on socket 0, 4-7 on socket 1


def plan(world, threads, *, topology=DGX, near=None, cores=range(224), **kwargs):
    return plan_affinity(
        mode="auto", cores=cores, world_size=world, threads_per_worker=threads, topology=topology, near=near, **kwargs
    )


def near_gpus(world):
    return [SOCKET[GPU_SOCKET[r % 8]] for r in range(world)]


def core_of(cpu: int) -> int:
    return cpu % 112


def span(start: int, count: int) -> set[int]:
    return set(range(start, start + count))


def assert_no_core_shared(rank_cores):
    owners = {}
    for rank, cpus in enumerate(rank_cores):
        for cpu in cpus:
            assert owners.setdefault(core_of(cpu), rank) == rank, f"rank {rank} shares core {core_of(cpu)}"


def test_eight_ranks_on_eight_gpus_get_fourteen_whole_cores_each_on_their_gpus_socket():
    p = plan(8, 28, near=near_gpus(8))
    expected = [span(14 * r, 14) | span(112 + 14 * r, 14) for r in range(4)]
    expected += [span(56 + 14 * i, 14) | span(168 + 14 * i, 14) for i in range(4)]
    assert p.pinned and [set(c) for c in p.rank_cores] == expected
    assert_no_core_shared(p.rank_cores)
    assert all(set(c) <= SOCKET[GPU_SOCKET[r]] for r, c in enumerate(p.rank_cores))
    assert p.parent_cores is None
    assert p.reason == (
        "8 rank(s) x 28 core(s) each, no physical core shared, each on its GPU's NUMA node; "
        "no spare core: the parent is not moved"
    )


def test_four_ranks_on_the_first_four_gpus_stay_on_socket_0_and_leave_socket_1_to_the_parent():
    p = plan(4, 56, near=near_gpus(4))
    assert [set(c) for c in p.rank_cores] == [span(14 * r, 14) | span(112 + 14 * r, 14) for r in range(4)]
    assert set(p.parent_cores) == SOCKET[1]
    assert p.reason.startswith(
        "4 rank(s) x 28 core(s) each, no physical core shared, each on its GPU's NUMA node, "
        "56 thread(s) time-share them; parent and sampler on the 112 spare core(s)"
    )


def test_a_block_smaller_than_the_share_takes_one_hyperthread_of_each_core_first():
    p = plan(8, 4, near=near_gpus(8), cores_per_worker=4)
    assert [set(c) for c in p.rank_cores] == [span(4 * r, 4) for r in range(4)] + [
        span(56 + 4 * i, 4) for i in range(4)
    ]
    # The parent gets whole cores no rank holds, not the siblings of the ranks' cores.
    assert set(p.parent_cores) == set(range(224)) - {c + d for c in range(16) for d in (0, 112)} - {
        c + d for c in range(56, 72) for d in (0, 112)
    }
    # A block bigger than a core's share of first threads goes on to the siblings of its own cores.
    p = plan(8, 28, near=near_gpus(8), cores_per_worker=20)
    assert set(p.rank_cores[0]) == span(0, 14) | span(112, 6) and set(p.rank_cores[4]) == span(56, 14) | span(168, 6)
    assert_no_core_shared(p.rank_cores)


@pytest.mark.parametrize(
    "world, expected",
    [
        (2, [SOCKET[0], SOCKET[1]]),
        (4, [span(28 * r, 28) | span(112 + 28 * r, 28) for r in range(4)]),
    ],
)
def test_without_gpus_ranks_still_get_whole_cores(world, expected):
    # Consecutive numbers would give rank 0 cpus 0-111 and rank 1 their 112 siblings at world 2.
    p = plan(world, 224 // world)
    assert [set(c) for c in p.rank_cores] == expected and p.parent_cores is None
    assert_no_core_shared(p.rank_cores)
    assert "no physical core shared" in p.reason and "NUMA" not in p.reason


def test_locality_that_cannot_hold_the_ranks_is_left_out_and_said():
    # A cpuset of socket 0 only: GPUs 4-7's node has no CPU here.
    p = plan(8, 1, near=near_gpus(8), cores=sorted(SOCKET[0]))
    assert_no_core_shared(p.rank_cores)
    assert [len(c) for c in p.rank_cores] == [14] * 8
    assert "(not on each GPU's NUMA node: its cores cannot hold its ranks' blocks)" in p.reason
    # Two physical cores for three ranks: their hyperthreads are shared, and the reason says so.
    tiny = CpuTopology.from_siblings([(0, 2), (1, 3)])
    p = plan(3, 1, topology=tiny, cores=range(4))
    assert p.rank_cores == ((0,), (1,), (2,)) and "hyperthreads shared" in p.reason


@given(
    physical=st.integers(1, 40),
    threads=st.integers(1, 2),
    world=st.integers(1, 12),
    block=st.one_of(st.none(), st.integers(1, 6)),
    gpus=st.integers(0, 4),
)
def test_pinned_ranks_never_share_a_physical_core_unless_the_reason_says_so(physical, threads, world, block, gpus):
    topology = CpuTopology.from_siblings(tuple(c + t * physical for t in range(threads)) for c in range(physical))
    cpus = range(physical * threads)
    half = frozenset(c for c in cpus if c % physical < physical // 2 or physical == 1)
    near = [half if (r % gpus) % 2 == 0 else frozenset(cpus) - half for r in range(world)] if gpus else None
    p = plan(world, 1, topology=topology, near=near, cores=cpus, cores_per_worker=block)
    if not p.pinned:
        return
    blocks = [set(b) for b in p.rank_cores]
    assert sum(map(len, blocks)) == len(set().union(*blocks))  # disjoint
    assert not set(p.parent_cores or ()) & set().union(*blocks)
    if "hyperthreads shared" not in p.reason:
        cores = [{c % physical for c in b} for b in blocks]
        assert sum(map(len, cores)) == len(set().union(*cores))


def test_the_topology_is_read_from_sysfs(tmp_path):
    for cpu, siblings in {0: "0,2", 1: "1,3", 2: "0,2", 3: "1,3"}.items():
        (tmp_path / f"cpu{cpu}" / "topology").mkdir(parents=True)
        (tmp_path / f"cpu{cpu}" / "topology" / "thread_siblings_list").write_text(siblings + "\n")
    (tmp_path / "cpu4").mkdir()  # offline: no topology directory
    (tmp_path / "cpufreq").mkdir()
    assert read_topology(str(tmp_path)) == CpuTopology(cores=((0, 2), (1, 3)))
    assert read_topology(str(tmp_path / "missing")) is None
    assert parse_cpulist("0-3,8,10-11\n") == (0, 1, 2, 3, 8, 10, 11)


class _Gpu(FakeGpu):
    cpus: frozenset = frozenset()


class _Nvml(FakeNvml):
    def nvmlDeviceGetCpuAffinity(self, gpu, words):
        self._enter("cpu_affinity")
        return [sum(1 << (c - 64 * w) for c in gpu.cpus if 64 * w <= c < 64 * (w + 1)) for w in range(words)]


def _dgx_gpus() -> _Nvml:
    gpus = []
    for i in range(8):
        gpu = _Gpu(f"GPU-{i}{i}-0000", f"00000000:{0x18 + 16 * i:02X}:00.0")
        gpu.cpus = SOCKET[GPU_SOCKET[i]]
        gpus.append(gpu)
    return _Nvml(gpus)


def test_each_ranks_gpu_locality_is_read_through_nvml_in_cudas_order():
    nvml = _dgx_gpus()
    assert gpu_local_cpus(8, {}, nvml=nvml, cpu_count=224) == tuple(near_gpus(8))
    # CUDA_VISIBLE_DEVICES=5,2: rank 0 drives GPU 5 (socket 1), rank 1 GPU 2 (socket 0), rank 2 GPU 5 again.
    visible = gpu_local_cpus(3, {"CUDA_VISIBLE_DEVICES": "5,2"}, nvml=nvml, cpu_count=224)
    assert visible == (SOCKET[1], SOCKET[0], SOCKET[1])
    assert nvml.refs == 0
    assert gpu_local_cpus(2, {}, nvml=FakeNvml([], init_error=9), cpu_count=224) is None
