"""The start-up check-in (dpbench/cluster/checkin.py) on loopback sockets: the handshake, a lost
agent and a lost head named at once, the head's final word, strangers and wrong keys refused, the
store probe, and the port's derivation and setting. No torch: the check-in runs before its import."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from dpbench.cluster import checkin
from dpbench.cluster.checkin import CheckinClient, CheckinServer, checkin_key, checkin_port, port_setting

KEY = checkin_key("job7", 0, 29400)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _until(condition, seconds: float = 5.0) -> float:
    """Seconds until ``condition()`` held (fails the test if it never did)."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < seconds, f"not within {seconds} s"
        time.sleep(0.02)
    return time.monotonic() - started


class Lost:
    def __init__(self):
        self.lines: list[str] = []

    def __call__(self, line: str) -> None:
        self.lines.append(line)


@pytest.fixture
def server():
    server = CheckinServer.start_for(_free_port(), KEY)
    yield server
    server.finish()


def _client(server, rank=1, key=KEY, store=None):
    lost = Lost()
    client = CheckinClient(
        ("127.0.0.1", server.port), key, {"rank": rank, "node": 1, "host": "b12", "pid": 42}, lost, store=store
    )
    client.start()
    return client, lost


def test_the_port_is_derived_from_what_every_node_shares():
    port = checkin_port("job7", 0, 29400)
    assert port == checkin_port("job7", 0, 29400) and 49152 <= port <= 60999
    # Another job, another restart, another store: (almost surely) another port and key.
    assert (
        len({port, checkin_port("job8", 0, 29400), checkin_port("job7", 1, 29400), checkin_port("job7", 0, 29401)}) == 4
    )
    assert KEY != checkin_key("job8", 0, 29400) and KEY == checkin_key("job7", 0, 29400)


@pytest.mark.parametrize("raw,expected", [("", None), ("  ", None), ("0", 0), ("50123", 50123), (" 1 ", 1)])
def test_the_port_setting(raw, expected):
    assert port_setting({checkin.PORT_ENV: raw}) == expected
    assert port_setting({}) is None


@pytest.mark.parametrize("raw", ["-1", "65536", "eight", "1.5"])
def test_a_bad_port_setting_is_one_line_naming_the_variable(raw):
    with pytest.raises(ValueError) as err:
        port_setting({checkin.PORT_ENV: raw})
    assert str(err.value) == (
        f"DPBENCH_CHECKIN_PORT must be a TCP port number (1-65535) or 0 to turn the start-up check-in off, got {raw!r}"
    )


def test_an_agent_checks_in_and_the_heads_joined_ends_it_quietly(server):
    client, lost = _client(server)
    _until(lambda: 1 in server.checked_in)
    assert server.checked_in[1] == {"rank": 1, "node": 1, "host": "b12", "pid": 42}
    # The head records the check-in before the agent has read the head's answer: wait for both.
    _until(lambda: client.state == "checked-in")
    assert server.lost() == []
    server.finish()
    client.join(5)
    assert client.state == "joined" and lost.lines == []


def test_an_agent_that_dies_while_it_starts_is_named_at_once(server):
    client, lost = _client(server, rank=3)
    # The head records the check-in inside the client's handshake, before the client holds its
    # socket: wait for the client's side too, or there is no socket yet to close.
    _until(lambda: 3 in server.checked_in and client.state == "checked-in")
    client.sock.shutdown(socket.SHUT_RDWR)  # what the kernel does for a killed process: FIN
    seconds = _until(lambda: server.lost())
    assert seconds < 1.5
    assert server.lost() == [
        "node 1 (host b12, rank 3) was lost while it started: its check-in link closed (the process or its node died)"
    ]


def test_a_node_whose_ranks_die_together_is_one_line_naming_them(server):
    clients = [_client(server, rank=r) for r in (5, 4)]
    other, _ = _client(server, rank=2)
    _until(lambda: len(server.checked_in) == 3 and all(c.state == "checked-in" for c, _ in clients))
    for client, _ in clients:  # node 1's two ranks (the _client default node): its node died
        client.sock.shutdown(socket.SHUT_RDWR)
    _until(lambda: "ranks 4, 5" in " ".join(server.lost()))
    assert server.lost() == [
        "node 1 (host b12, ranks 4, 5) was lost while it started: its check-in link closed "
        "(the process or its node died)"
    ]


def test_a_head_that_dies_makes_a_starting_agent_leave_with_one_line(server):
    client, lost = _client(server)
    _until(lambda: client.state == "checked-in")
    for sock in list(server.links):  # the head's end goes away without a word
        sock.shutdown(socket.SHUT_RDWR)
    seconds = _until(lambda: lost.lines)
    assert seconds < 1.5 and client.state == "lost"
    assert lost.lines == [
        "lost the head (rank 0) while starting: its check-in link closed (the process or its node died)"
    ]


def test_an_interrupt_as_the_head_dies_waits_for_the_loss_to_be_said(server):
    """torchrun SIGTERMs its workers when node 0's store goes away: the agent's interrupt path settles
    first, so the head's loss (not "interrupted") is the line it leaves with."""
    client, lost = _client(server)
    _until(lambda: client.state == "checked-in")
    for sock in list(server.links):
        sock.shutdown(socket.SHUT_RDWR)
    client.settle(5.0)  # returns as soon as the loss is said, not after 5 s
    assert client.state == "lost" and len(lost.lines) == 1


def test_settle_waits_only_while_the_check_in_watches_the_head(server):
    client, lost = _client(server)
    _until(lambda: client.state == "checked-in")
    started = time.monotonic()
    client.settle(0.3)  # a live head: the whole grace, then on
    assert 0.25 <= time.monotonic() - started < 2 and client.state == "checked-in"
    client.handover()
    started = time.monotonic()
    client.settle(5.0)  # joined: nothing to wait for
    assert time.monotonic() - started < 0.5 and lost.lines == []


def test_the_loss_and_an_interrupt_never_interleave_their_last_lines():
    """leave() holds the last word until the process ends: the main thread's line waits for it."""
    import subprocess
    import sys

    # A slow stderr keeps leave() inside its print while the main thread comes to say its line.
    probe = (
        "import sys, threading, time; from dpbench.cluster import checkin\n"
        "class Slow:\n"
        "    def write(self, s): time.sleep(0.2); return sys.__stderr__.write(s)\n"
        "    def flush(self): sys.__stderr__.flush()\n"
        "sys.stderr = Slow()\n"
        "threading.Thread(target=checkin.leave, args=('lost the head',)).start(); time.sleep(0.05)\n"
        "checkin.last_word('interrupted')\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stderr) == (1, "lost the head\n")


def test_a_head_that_gives_up_the_start_says_why_to_every_agent(server):
    clients = [_client(server, rank=r) for r in (1, 2)]
    _until(lambda: len(server.checked_in) == 2)
    server.finish(failed="node 2 (host c3, rank 5) was lost while it started: its check-in link closed\nsecond line")
    for client, lost in clients:
        client.join(5)
        assert lost.lines == [
            "the head (rank 0) gave up the start: node 2 (host c3, rank 5) was lost while it "
            "started: its check-in link closed second line"
        ]


def test_after_handover_a_closing_link_is_not_news_and_the_agent_keeps_its_end_open(server):
    client, lost = _client(server)
    _until(lambda: client.state == "checked-in")
    client.handover()
    time.sleep(0.3)
    assert server.lost() == []  # the agent did not close its end: to the head that would be a lost node
    for sock in list(server.links):
        sock.shutdown(socket.SHUT_RDWR)
    client.join(5)
    assert client.state == "handed-over" and lost.lines == []


def test_a_wrong_key_is_refused_both_ways(server):
    client, lost = _client(server, key=checkin_key("another-job", 0, 29400))
    client.join(6)
    assert client.state == "refused" and lost.lines == []
    assert server.checked_in == {} and server.lost() == []


def test_a_silent_stranger_does_not_hold_up_the_agents(server):
    stranger = socket.create_connection(("127.0.0.1", server.port))
    try:
        client, lost = _client(server)
        assert _until(lambda: 1 in server.checked_in) < 2.0  # while the stranger sits in its handshake
        assert server.lost() == []
    finally:
        stranger.close()
    assert server.lost() == []  # a stranger leaving is nobody's loss


def test_a_port_that_is_not_a_check_in_port_is_given_up():
    other = socket.socket()
    other.bind(("127.0.0.1", 0))
    other.listen(1)
    port = other.getsockname()[1]

    def speak():
        conn, _ = other.accept()
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        time.sleep(0.5)
        conn.close()

    threading.Thread(target=speak, daemon=True).start()
    lost = Lost()
    client = CheckinClient(("127.0.0.1", port), KEY, {"rank": 1}, lost)
    client.start()
    client.join(5)
    other.close()
    assert client.state == "refused" and lost.lines == []


@pytest.mark.slow  # over a second under the suite's load: out of the fast tier
def test_an_agent_whose_head_and_store_both_refuse_says_node_0_is_gone():
    port, store = _free_port(), _free_port()  # nothing listens on either
    lost = Lost()
    client = CheckinClient(("127.0.0.1", port), KEY, {"rank": 1}, lost, store=("127.0.0.1", store))
    client.start()
    seconds = _until(lambda: lost.lines, seconds=6.0)
    assert 0.9 <= seconds < 4.0  # three refusals, half a second apart
    assert lost.lines == [
        f"node 0's torchrun is gone: its store at 127.0.0.1:{store} refuses connections and the "
        f"head's check-in port was never reached"
    ]


@pytest.mark.slow  # over a second under the suite's load: out of the fast tier
def test_while_the_store_answers_an_agent_waits_for_the_head_and_handover_ends_it():
    port = _free_port()
    store = socket.socket()
    store.bind(("127.0.0.1", 0))
    store.listen(16)
    try:
        lost = Lost()
        client = CheckinClient(("127.0.0.1", port), KEY, {"rank": 1}, lost, store=store.getsockname())
        client.start()
        time.sleep(2.5)  # the head is late (still binding): the store is up, so node 0 is not gone
        assert lost.lines == [] and client.state == "connecting"
        client.handover()
        client.join(2)
        assert not client.is_alive() and lost.lines == []
    finally:
        store.close()


def test_a_head_that_cannot_bind_the_port_says_so_and_goes_on(monkeypatch, capsys):
    from dpbench.cluster.main import _start_checkin
    from dpbench.cluster.node import ClusterInfo

    taken = socket.socket()
    taken.bind(("0.0.0.0", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    info = ClusterInfo(
        rank=0,
        world_size=2,
        local_rank=0,
        local_world_size=1,
        node_rank=0,
        nodes=2,
        master_addr="127.0.0.1",
        master_port=29400,
        run_id="job7",
    )
    try:
        assert _start_checkin(info, port, "rank 0, node 0, host a1") is None
    finally:
        taken.close()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"dpbench.cluster (rank 0, node 0, host a1): no start-up check-in (port {port}: "
    )
    assert err[0].endswith(
        "DPBENCH_CHECKIN_PORT picks another): a node that dies while the run starts is noticed at the join deadline"
    )
    assert _start_checkin(info, 0, "w") is None  # 0: off


def test_the_cluster_runner_reaches_its_check_in_without_torch_or_the_pools():
    """``python -m dpbench.cluster`` imports the package and the module before main() starts
    the check-in: neither may pull in torch or the launcher's pools (each costs the start-up window
    in which a dying node goes unnoticed)."""
    import subprocess
    import sys

    probe = (
        "import sys, dpbench.cluster, dpbench.cluster.main, dpbench.cluster.node; "
        "print(sorted(m for m in ('torch', 'dpbench.workers.pool', 'dpbench.cluster.remote', "
        "'dpbench.launcher.run') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
