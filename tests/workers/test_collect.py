"""The wait both pools share: answers by rank, failures named after a grace, silent ranks named.

Ranks here are the far ends of in-process pipes, so nothing is spawned; the pools' own tests
(test_worker_pool.py, tests/cluster) check the same errors with real workers.
"""

from __future__ import annotations

import pickle
from multiprocessing import Pipe

import pytest

from dpbench.workers.base import WorkerError, WorkerTimeoutError
from dpbench.workers.collect import Heard, Hearing, RankNames, collect_ranks, failure_error

NAMES = RankNames(
    label=lambda rank: f"rank {rank} (node 0, host h)",
    group=lambda ranks: ", ".join(f"rank {r} (node 0, host h)" for r in ranks),
    world="world_size=3 on 1 node(s)",
    stopped="every rank's worker was stopped",
)


def _hear(ready, rank):
    tag, value = pickle.loads(ready.recv_bytes())
    if tag == "result":
        return Heard(hearing=Hearing.DONE, value=value)
    if tag == "error":
        return Heard(hearing=Hearing.FAILED, value=value)
    return Heard(hearing=Hearing.ALIVE if tag == "heartbeat" else Hearing.OTHER)


def _collect(messages: dict[int, list[tuple[str, object]]], *, world_size: int = 3, timeout: float = 30.0):
    ends = [Pipe(duplex=False) for _ in range(world_size)]
    for rank, (_, sender) in enumerate(ends):
        for message in messages.get(rank, []):
            sender.send_bytes(pickle.dumps(message))
    return collect_ranks(
        world_size=world_size,
        timeout=timeout,
        waitables={receiver: rank for rank, (receiver, _) in enumerate(ends)},
        hear=_hear,
        names=NAMES,
        fail=lambda failures: failure_error(failures, names=NAMES, order=sorted(failures), first=min(failures)),
    )


def test_every_ranks_answer_comes_back_by_rank():
    answers = _collect(
        {0: [("heartbeat", None), ("result", "a")], 1: [("old", None), ("result", "b")], 2: [("result", "c")]}
    )
    assert answers == ["a", "b", "c"]


def test_failures_are_named_by_the_pools_labels_after_the_grace():
    with pytest.raises(WorkerError) as info:
        _collect({0: [("result", "a")], 1: [("error", "Traceback: one\n")], 2: [("error", "Traceback: two")]})
    assert str(info.value) == (
        "worker rank 1 (node 0, host h), rank 2 (node 0, host h) failed (world_size=3 on 1 node(s)):\n"
        "--- rank 1 (node 0, host h) ---\nTraceback: one\n--- rank 2 (node 0, host h) ---\nTraceback: two"
    )
    assert info.value.rank == 1 and set(info.value.failures) == {1, 2}


def test_a_rank_known_failed_before_the_wait_is_reported_without_a_message():
    with pytest.raises(WorkerError, match=r"(?s)worker rank 2 \(node 0, host h\) failed.*agent went away"):
        collect_ranks(
            world_size=3,
            timeout=30.0,
            waitables={},
            hear=_hear,
            names=NAMES,
            fail=lambda failures: failure_error(failures, names=NAMES, order=sorted(failures), first=min(failures)),
            failed={2: "agent went away"},
        )


def test_silent_ranks_are_all_named_in_the_timeout():
    with pytest.raises(WorkerTimeoutError) as info:
        _collect({0: [("result", "a")]}, timeout=0.2)
    assert str(info.value) == (
        "no message from worker rank 1 (node 0, host h), rank 2 (node 0, host h) for 0.2 s (timeout); "
        "every rank's worker was stopped. Raise `timeout` if a single step legitimately takes this long."
    )
    assert info.value.rank == 1 and info.value.failures == {1: "silent for 0.2 s", 2: "silent for 0.2 s"}


def test_once_every_rank_failed_the_grace_is_not_waited_out(monkeypatch):
    """A failure's grace listens for the other ranks; when all have failed there is nothing left to
    hear, so no further wait (before, the loop slept out the whole grace: 0.5 s a failure, the
    helper-gone grace of seconds where a forkserver helper died)."""
    import dpbench.workers.collect as collect

    calls = []
    real = collect.wait

    def counted(objects, timeout=None):
        calls.append(len(objects))
        return real(objects, timeout=timeout)

    monkeypatch.setattr(collect, "wait", counted)
    with pytest.raises(WorkerError) as info:
        _collect({0: [("error", "zero")], 1: [("error", "one")], 2: [("error", "two")]})
    assert set(info.value.failures) == {0, 1, 2}
    assert calls == [3]  # the one wait that heard all three, then no empty wait for the grace
