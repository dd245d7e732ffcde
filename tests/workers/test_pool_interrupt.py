"""Ctrl-C while a pool is closing still stops every worker and removes the rendezvous directory
(issue: an interrupted suite left a dpbench-rdzv-* directory behind)."""

from __future__ import annotations

import os

import pytest

from dpbench.launcher import WorkerPool


def test_interrupt_during_the_polite_close_still_cleans_up():
    pool = WorkerPool(2, timeout=30.0)
    procs, tmpdir = list(pool._procs), pool._tmpdir
    assert os.path.isdir(tmpdir)
    real_join = procs[0].join
    calls = {"n": 0}

    def interrupted_join(timeout=None):
        calls["n"] += 1
        if calls["n"] == 1:  # the polite wait: Ctrl-C lands here
            raise KeyboardInterrupt
        return real_join(timeout)

    procs[0].join = interrupted_join
    with pytest.raises(KeyboardInterrupt):
        pool.close()
    assert pool.closed
    assert not any(p.is_alive() for p in procs)
    assert not os.path.exists(tmpdir)
