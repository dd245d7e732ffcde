"""fresh_forkserver: the suites restart multiprocessing's forkserver helper before each trial pass,
so that no session-wide luck of one helper is shared by every worker (workers/forkserver.py)."""

from __future__ import annotations

import psutil
import pytest
from _launch_helpers import helper_pid, recall, remember

from dpbench.launcher import WorkerPool
from dpbench.workers import forkserver as forkserver_module
from dpbench.workers.forkserver import fresh_forkserver, worker_start

pytestmark = pytest.mark.skipif(
    forkserver_module.START_METHOD != "forkserver", reason="needs the forkserver start method"
)


@pytest.mark.slow
def test_the_next_pool_after_a_fresh_helper_is_forked_from_a_new_one():
    with WorkerPool(2, process_group=False, timeout=60.0) as first:
        before = set(first.run(helper_pid))
    assert len(before) == 1  # every worker of a pool comes from one helper
    (old,) = before
    assert fresh_forkserver() is True
    assert not psutil.pid_exists(old)  # stopped and reaped, not left as a zombie
    assert fresh_forkserver() is False  # no helper running: nothing to stop
    with WorkerPool(2, process_group=False, timeout=60.0) as second:
        after = set(second.run(helper_pid))
    assert len(after) == 1 and after != before
    # Without a restart, the next pool shares the helper (what the suites did before).
    with WorkerPool(1, process_group=False, timeout=60.0) as third:
        assert set(third.run(helper_pid)) == after


@pytest.mark.slow
def test_it_is_refused_while_a_pool_is_open_and_that_pool_goes_on():
    with WorkerPool(2, timeout=60.0) as workers:
        with pytest.raises(RuntimeError) as err:
            fresh_forkserver()
        assert str(err.value) == (
            "fresh_forkserver: 1 worker pool(s) still open; their workers would die with the helper: close them first"
        )
        workers.run(remember, 10)
        assert workers.run(recall) == [10, 20]


def test_worker_start_names_what_the_session_does():
    assert worker_start(True) == "forkserver, a fresh helper each trial pass"
    assert worker_start(False) == "forkserver, one helper per session"
