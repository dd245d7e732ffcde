"""A rank whose parent is gone (the run stopped while it started or worked) leaves quietly: a
BrokenPipeError escaping the rank printed a ``Process dpbench-rank0:`` traceback below the run's last
line, and one in the keep-alive thread an ``Exception in thread`` one."""

from __future__ import annotations

import multiprocessing
import pickle

from dpbench.workers.worker import WorkerContext, tell


def _closed_pipe():
    mine, theirs = multiprocessing.Pipe()
    theirs.close()
    return mine


def test_tell_says_false_where_the_parent_is_gone_and_true_where_it_listens(capfd):
    gone = _closed_pipe()
    assert tell(gone, ("error", "traceback text")) is False
    assert tell(gone, pickle.dumps(("result", 1))) is False
    mine, theirs = multiprocessing.Pipe()
    assert tell(mine, ("ready", {"rank": 0})) is True
    assert pickle.loads(theirs.recv_bytes()) == ("ready", {"rank": 0})
    assert capfd.readouterr() == ("", "")


def test_a_heartbeat_to_a_gone_parent_raises_nothing(capfd):
    ctx = WorkerContext(0, 1, "cpu", None, None, _conn=_closed_pipe())
    ctx._last_beat = -1e9  # due now
    ctx.heartbeat()
    assert capfd.readouterr() == ("", "")
