"""parallel_apply and ReplicaThreads: ordering, thread state, exceptions, persistent threads."""

from __future__ import annotations

import threading
import time

import pytest
import torch
from torch import nn

from dpbench.parallel import ReplicaThreads, parallel_apply


class Probe(nn.Module):
    """Records the thread and torch thread-local state it ran under; optionally fails."""

    def __init__(self, fail: type[BaseException] | None = None, delay: float = 0.0):
        super().__init__()
        self.fail, self.delay, self.seen = fail, delay, {}

    def forward(self, x, *, add=0):
        time.sleep(self.delay)
        self.seen = {
            "thread": threading.current_thread(),
            "grad": torch.is_grad_enabled(),
            "inference": torch.is_inference_mode_enabled(),
            "autocast": torch.is_autocast_enabled("cpu"),
            "dtype": torch.get_autocast_dtype("cpu"),
        }
        if self.fail is KeyError:
            raise KeyError("missing_key")
        if self.fail is not None:
            raise self.fail("replica exploded")
        return torch.nn.functional.linear(x, torch.ones(2, x.size(-1))) + add


def test_outputs_in_order_with_kwargs_and_single_tensor_inputs():
    mods = [Probe(delay=0.02 * (2 - i)) for i in range(3)]  # later replicas finish first
    xs = [torch.full((1, 3), float(i)) for i in range(3)]
    outs = parallel_apply(mods, xs, [{"add": i} for i in range(3)], ["cpu"] * 3)
    for i, out in enumerate(outs):
        torch.testing.assert_close(out, torch.full((1, 2), 4.0 * i))
    assert mods[0].seen["thread"] is threading.current_thread()  # replica 0 runs in the caller
    assert len({m.seen["thread"] for m in mods}) == 3


def test_grad_inference_and_autocast_dtype_are_carried_into_workers():
    mods = [Probe(), Probe()]
    xs = [torch.ones(1, 3), torch.ones(1, 3)]
    with torch.no_grad():
        parallel_apply(mods, xs)
    assert [m.seen["grad"] for m in mods] == [False, False]
    with torch.inference_mode():
        parallel_apply(mods, xs)
    assert [m.seen["inference"] for m in mods] == [True, True]
    # float16 is not the CPU default (bfloat16), so a dropped dtype would show here.
    for dtype in (torch.bfloat16, torch.float16):
        with torch.autocast("cpu", dtype=dtype):
            outs = parallel_apply(mods, xs)
        assert [o.dtype for o in outs] == [dtype, dtype]
        assert [m.seen["dtype"] for m in mods] == [dtype, dtype]
    parallel_apply(mods, xs)
    assert [m.seen["autocast"] for m in mods] == [False, False]  # and nothing leaks into later calls


@pytest.mark.parametrize("failing", [0, 1])
def test_exception_is_reraised_with_type_replica_device_and_traceback(failing):
    mods = [Probe(fail=ValueError if i == failing else None, delay=0.05 if i != failing else 0.0) for i in range(2)]
    with pytest.raises(ValueError) as info:
        parallel_apply(mods, [torch.ones(1, 3)] * 2, devices=["cpu", "cpu"])
    msg = str(info.value)
    assert msg.startswith(
        f"Caught ValueError in replica {failing} on device cpu.\nOriginal Traceback (most recent call last):"
    )
    assert "in forward" in msg and "ValueError: replica exploded" in msg
    # the other replica finished before the call returned (nothing is left running)
    other = mods[1 - failing]
    assert other.seen, "the healthy replica did not run to completion"


def test_keyerror_message_stays_readable_and_odd_exceptions_fall_back():
    with pytest.raises(KeyError) as info:
        parallel_apply([Probe(), Probe(fail=KeyError)], [torch.ones(1, 3)] * 2)
    assert "Caught KeyError in replica 1 on device cpu.\n" in str(info.value)

    class TwoArgs(Exception):
        def __init__(self, a, b):
            super().__init__(a, b)

    class Raiser(nn.Module):
        def forward(self, x):
            raise TwoArgs(1, 2)

    with pytest.raises(RuntimeError, match=r"Caught TwoArgs in replica 1 on device cpu"):
        parallel_apply([Probe(), Raiser()], [torch.ones(1, 3)] * 2)


def test_length_mismatches_are_clear_errors():
    with pytest.raises(ValueError, match="inputs: the number of modules 2 is not equal to the number of inputs 1"):
        parallel_apply([Probe(), Probe()], [torch.ones(1)])
    with pytest.raises(ValueError, match="kwargs_tup: the number of modules 1"):
        parallel_apply([Probe()], [torch.ones(1)], [{}, {}])
    with pytest.raises(ValueError, match="devices: the number of modules 1"):
        parallel_apply([Probe()], [torch.ones(1)], None, ["cpu", "cpu"])
    assert parallel_apply([], []) == []


def test_replica_threads_persist_and_close_stops_them():
    pool = ReplicaThreads(name="test-pool")
    mods = [Probe() for _ in range(3)]
    before = threading.active_count()
    seen_threads = set()
    for _ in range(4):
        parallel_apply(mods, [torch.ones(1, 3)] * 3, threads=pool)
        seen_threads |= {m.seen["thread"] for m in mods[1:]}
    assert pool.num_threads == 2 and len(seen_threads) == 2  # the same two workers every time
    assert threading.active_count() == before + 2
    assert all(t.daemon for t in seen_threads)
    with pytest.raises(ValueError):  # a failure does not kill a worker
        parallel_apply([Probe(), Probe(fail=ValueError)], [torch.ones(1, 3)] * 2, threads=pool)
    parallel_apply(mods, [torch.ones(1, 3)] * 3, threads=pool)
    assert pool.num_threads == 2
    pool.close()
    assert pool.num_threads == 0 and not any(t.is_alive() for t in seen_threads)
    parallel_apply(mods, [torch.ones(1, 3)] * 3, threads=pool)  # usable again after close
    assert pool.num_threads == 2
    pool.close()


def test_temporary_threads_are_gone_after_the_call():
    before = {t.ident for t in threading.enumerate()}
    parallel_apply([Probe(), Probe()], [torch.ones(1, 3)] * 2)
    assert {t.ident for t in threading.enumerate()} <= before


def test_garbage_collected_pool_stops_its_threads():
    pool = ReplicaThreads(name="gc-pool")
    parallel_apply([Probe(), Probe()], [torch.ones(1, 3)] * 2, threads=pool)
    (worker,) = [t for t in threading.enumerate() if t.name.startswith("gc-pool")]
    del pool
    worker.join(timeout=5)
    assert not worker.is_alive()


def test_intra_op_thread_count_is_applied_in_worker_threads(monkeypatch):
    # Threads torch did not start ignore the caller's torch.set_num_threads for BLAS; the
    # workers must set it themselves (observed here through the public call they make).
    calls = []
    original = torch.set_num_threads

    def recording(n):
        calls.append((threading.current_thread(), n))
        original(n)

    monkeypatch.setattr(torch, "set_num_threads", recording)
    before = torch.get_num_threads()
    try:
        original(1)
        mods = [Probe(), Probe(), Probe()]
        parallel_apply(mods, [torch.ones(1, 3)] * 3)
        workers = {m.seen["thread"] for m in mods[1:]}
        assert {t for t, n in calls if n == 1} == workers
    finally:
        original(before)


def test_close_from_another_thread_during_a_call_does_not_hang():
    pool = ReplicaThreads(name="race-pool")
    mods = [Probe(delay=0.1) for _ in range(3)]
    results = []
    caller = threading.Thread(target=lambda: results.append(parallel_apply(mods, [torch.ones(1, 3)] * 3, threads=pool)))
    caller.start()
    time.sleep(0.02)  # let the call submit its jobs (either order must end well)
    pool.close()
    caller.join(timeout=30)
    assert not caller.is_alive(), "parallel_apply hung after a concurrent close()"
    assert len(results) == 1 and len(results[0]) == 3
    pool.close()


class FailsWithoutInputs(nn.Module):
    """Holds one tensor on ``device`` (a parameter or a buffer) and fails in forward."""

    def __init__(self, device: str, *, as_buffer: bool = False):
        super().__init__()
        t = torch.zeros(1, device=device)
        if as_buffer:
            self.register_buffer("state", t)
        else:
            self.weight = nn.Parameter(t)

    def forward(self, *args):
        return {}["wonderful"]


@pytest.mark.parametrize("as_buffer", [False, True], ids=["parameter", "buffer"])
def test_replica_without_tensor_inputs_is_named_by_its_module_device(as_buffer):
    # meta is a device no fallback would pick: the name can only come from the module's tensor
    for first in ("meta", "cpu"):  # the first failing replica is the one re-raised
        second = "cpu" if first == "meta" else "meta"
        mods = (FailsWithoutInputs(first, as_buffer=as_buffer), FailsWithoutInputs(second, as_buffer=as_buffer))
        with pytest.raises(KeyError, match=rf"Caught KeyError in replica 0 on device {first}\.\nOriginal Traceback"):
            parallel_apply(mods, (None, None))
