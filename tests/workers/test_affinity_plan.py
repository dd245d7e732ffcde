"""The pinning plan as a pure function of (mode, cores, ranks, threads), on fake core lists."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dpbench.workers.affinity import plan_affinity, resolve_mode


def plan(cores, world_size, threads, **kwargs):
    return plan_affinity(mode="auto", cores=cores, world_size=world_size, threads_per_worker=threads, **kwargs)


def test_two_ranks_on_two_cores_get_one_core_each_and_the_parent_stays():
    p = plan([0, 1], 2, 1)
    assert p.pinned and p.rank_cores == ((0,), (1,))
    assert p.parent_cores is None and "no spare core" in p.reason


def test_equal_share_by_default_even_when_threads_are_fewer():
    # A worker may run more threads than its intra-op count (dp: one per replica), so the
    # default block is the fair share, not threads_per_worker.
    p = plan(range(8), 2, 1)
    assert p.rank_cores == ((0, 1, 2, 3), (4, 5, 6, 7)) and p.parent_cores is None


def test_explicit_block_size_leaves_spare_cores_to_the_parent():
    p = plan(range(8), 2, 2, cores_per_worker=2)
    assert p.rank_cores == ((0, 1), (2, 3)) and p.parent_cores == (4, 5, 6, 7)
    assert "spare core(s) [4, 5, 6, 7]" in p.reason


def test_remainder_of_the_share_goes_to_the_parent():
    p = plan(range(8), 3, 2)
    assert p.rank_cores == ((0, 1), (2, 3), (4, 5)) and p.parent_cores == (6, 7)


def test_cores_outside_a_cpuset_are_never_used():
    p = plan([9, 2, 7, 5], 2, 2)  # unsorted, with holes, as sched_getaffinity may report
    assert p.rank_cores == ((2, 5), (7, 9)) and p.available_cores == (2, 5, 7, 9)


@pytest.mark.parametrize(
    "cores, world, threads, kwargs, reason",
    [
        ([0], 2, 1, {}, "fewer cores (1) than ranks (2)"),
        ([0, 1], 2, 2, {}, "2 rank(s) x 2 thread(s) > 2 cores (oversubscribed)"),
        ([0, 1, 2], 2, 1, {"cores_per_worker": 2}, "2 rank(s) x 2 core(s) > 3 cores"),
    ],
)
def test_too_few_cores_means_no_pinning_and_says_why(cores, world, threads, kwargs, reason):
    p = plan(cores, world, threads, **kwargs)
    assert not p.pinned and p.rank_cores is None and p.parent_cores is None
    assert reason in p.reason


def test_off_and_unsupported_platforms_pin_nothing():
    off = plan_affinity(mode="off", cores=[0, 1], world_size=2, threads_per_worker=1, off_reason="affinity='off'")
    assert not off.pinned and off.reason == "affinity='off'" and off.rank_cores is None
    nowhere = plan(None, 2, 1)
    assert not nowhere.pinned and "os.sched_setaffinity is not available" in nowhere.reason


def test_plan_dict_is_json_with_lists():
    d = plan(range(4), 1, 1, cores_per_worker=1).to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d == {
        "mode": "auto",
        "pinned": True,
        "reason": d["reason"],
        "available_cores": [0, 1, 2, 3],
        "rank_cores": [[0]],
        "parent_cores": [1, 2, 3],
    }


@given(
    cores=st.sets(st.integers(0, 255), min_size=1, max_size=64),
    world=st.integers(1, 12),
    threads=st.integers(1, 8),
    block=st.one_of(st.none(), st.integers(1, 8)),
)
def test_pinned_blocks_are_disjoint_and_cover_the_cores(cores, world, threads, block):
    p = plan(sorted(cores), world, threads, cores_per_worker=block)
    if not p.pinned:
        need = world * (block if block is not None else threads)
        assert need > len(cores) or len(cores) < world
        return
    blocks = [set(b) for b in p.rank_cores]
    assert len(blocks) == world and all(blocks)
    assert sum(len(b) for b in blocks) == len(set().union(*blocks))  # disjoint
    size = block if block is not None else len(cores) // world
    assert all(len(b) == size for b in blocks) and size >= (threads if block is None else 1)
    spare = set(p.parent_cores or ())
    assert not spare & set().union(*blocks)
    assert spare | set().union(*blocks) == cores


@pytest.mark.parametrize(
    "affinity, environ, expected",
    [
        ("auto", {}, ("auto", None)),
        ("auto", {"DPBENCH_PIN": "1"}, ("auto", None)),
        ("auto", {"DPBENCH_PIN": "0"}, ("off", "DPBENCH_PIN=0 in the environment")),
        ("off", {"DPBENCH_PIN": "1"}, ("off", "affinity='off'")),  # 1 does not force pinning on
        ("off", {}, ("off", "affinity='off'")),
    ],
)
def test_mode_from_argument_and_environment(affinity, environ, expected):
    assert resolve_mode(affinity, environ) == expected


@pytest.mark.parametrize(
    "affinity, environ, message",
    [
        ("on", {}, "affinity must be one of 'auto', 'off', got 'on'"),
        (True, {}, "affinity must be one of 'auto', 'off', got True"),
        ("auto", {"DPBENCH_PIN": "no"}, "DPBENCH_PIN must be '0' (pinning off) or '1'"),
    ],
)
def test_bad_mode_is_a_clear_error(affinity, environ, message):
    with pytest.raises(ValueError) as info:
        resolve_mode(affinity, environ)
    assert message in str(info.value)
