"""The agents' check-in: a node that dies while its dpbench still starts is noticed in seconds.

Between torchrun starting its workers and an agent's hello (:mod:`dpbench.cluster`) lie
seconds in which neither end can watch the other through the session's links: an agent learns the
head's address from torchrun's store, which needs torch imported (2–4 s on an idle machine, tens of
seconds on a loaded node), and the head needs its own import before it can publish that address.
Without a link of their own, a node killed then would be noticed only at the head's join deadline (≥ 30 s).

So both ends open a *check-in link* first, with the standard library alone, before either imports
torch. The head listens on a port both ends derive from torchrun's rendezvous id, restart count and
store port (:func:`checkin_port`, in 49152–60999: the IANA dynamic range, inside Linux's default
ephemeral range, where no fixed service lives; ``DPBENCH_CHECKIN_PORT`` picks another, ``0`` turns
the check-in off); each agent connects to ``MASTER_ADDR`` at that port. Both ends prove they know a
key derived from the same values (an HMAC challenge each way), so a stranger — another job's head
on the port, a port scanner — is refused either way. That key is no secret from anyone who knows the
rendezvous id, which is all torchrun's own rendezvous asks: the link carries nothing but the check-in
itself and the head's final "joined", never a call (calls go over the links the head authenticates
with a random key it publishes in the store).

While a link is up, its end closing (the process died, its node rebooted: the kernel sends FIN or
RST) is noticed at once, and a peer that vanishes without a word (power lost, network down) by TCP
keep-alive within about :data:`KEEPALIVE_SECONDS` — the kernel's probes, which no import holding
Python's GIL can delay. A hung but connected peer is left to the join deadline. On the head a lost
link fails the start with one line naming the rank, its node and host; on an agent a lost head makes
it exit 1 at once with one line (it has started no workers yet: there is nothing to stop). Once
every agent has joined, the head sends "joined" on each link and closes it: the session's heartbeats
(:mod:`dpbench.cluster.liveness`) take over.

An agent that cannot reach the check-in port keeps trying until it joins; if meanwhile torchrun's
store port on node 0 refuses connections too (the store is hosted by node 0's torchrun, up since the
rendezvous), node 0 is gone, and the agent says so and exits 1 rather than wait out the store's
timeout. Best effort: when the head cannot bind the port, or the port is filtered between nodes,
nothing changes except that a death during the start is noticed at the join deadline, as before.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import select
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = [
    "CheckinClient",
    "CheckinServer",
    "KEEPALIVE_SECONDS",
    "PORT_ENV",
    "checkin_key",
    "checkin_port",
    "port_setting",
]

PORT_ENV = "DPBENCH_CHECKIN_PORT"
PORT_RANGE = (49152, 60999)
_MAGIC = b"DPBC1"
_NONCE = 16
_DIGEST = 32
_JOINED = b"J"
_FAILED = b"F"  # + one line, "\n": the head gave up the start (a rank missing or lost)
_HANDSHAKE_SECONDS = 5.0
_RETRY_SECONDS = 0.2
# TCP keep-alive: first probe after 2 s idle, then every second, 4 unanswered → the peer is gone.
_KEEPIDLE, _KEEPINTVL, _KEEPCNT = 2, 1, 4
KEEPALIVE_SECONDS = _KEEPIDLE + _KEEPINTVL * _KEEPCNT
# The agent's probe of torchrun's store when the check-in port refuses: this many refusals in a row,
# this far apart, mean node 0's torchrun (the store's host) is gone.
_STORE_REFUSALS, _STORE_PROBE_SECONDS = 3, 0.5


def port_setting(environ: dict[str, str] | os._Environ) -> int | None:
    """``DPBENCH_CHECKIN_PORT``: None when unset (derive the port), 0 (off) or a port number.
    Raises ValueError with the variable named for anything else."""
    raw = environ.get(PORT_ENV, "").strip()
    if not raw:
        return None
    try:
        port = int(raw)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ValueError(
            f"{PORT_ENV} must be a TCP port number (1-65535) or 0 to turn the start-up check-in off, got {raw!r}"
        )
    return port


def _identity(run_id: str, restart_count: int, master_port: int) -> bytes:
    return f"dpbench-checkin/{run_id}/{restart_count}/{master_port}".encode()


def checkin_port(run_id: str, restart_count: int, master_port: int) -> int:
    """The port every node derives from what torchrun gave all of them alike."""
    low, high = PORT_RANGE
    digest = hashlib.sha256(b"port/" + _identity(run_id, restart_count, master_port)).digest()
    return low + int.from_bytes(digest[:4], "big") % (high - low + 1)


def checkin_key(run_id: str, restart_count: int, master_port: int) -> bytes:
    return hashlib.sha256(b"key/" + _identity(run_id, restart_count, master_port)).digest()


def _mac(key: bytes, role: bytes, nonce: bytes) -> bytes:
    return hmac.new(key, role + nonce, hashlib.sha256).digest()


def _keepalive(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", _KEEPIDLE), ("TCP_KEEPINTVL", _KEEPINTVL), ("TCP_KEEPCNT", _KEEPCNT)):
        if hasattr(socket, name):  # Linux; elsewhere the system's keep-alive timing applies
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("closed during the check-in")
        data += chunk
    return data


class CheckinServer(threading.Thread):
    """The head's end: accepts the agents' check-ins and watches each link until :meth:`finish`.

    ``lost()`` → one line per node with links lost before :meth:`finish`, naming its host and the
    ranks lost so far (the cluster runner fails the start with the first)."""

    def __init__(self, listener: socket.socket, key: bytes):
        super().__init__(name="dpbench-cluster-checkin", daemon=True)
        self.listener, self.key = listener, key
        self.port = listener.getsockname()[1]
        self.links: dict[socket.socket, dict[str, Any]] = {}  # checked-in link → what the agent said
        self.checked_in: dict[int, dict[str, Any]] = {}  # rank → what it said
        self._lost: list[tuple[Any, Any, int, str]] = []  # (node, host, rank, why), in the order noticed
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()

    @classmethod
    def start_for(cls, port: int, key: bytes) -> CheckinServer:
        """Bind and start; raises OSError when the port cannot be bound."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("0.0.0.0", port))
            listener.listen(128)
        except OSError:
            listener.close()
            raise
        server = cls(listener, key)
        server.start()
        return server

    def lost(self) -> list[str]:
        with self._lock:
            lost = list(self._lost)
        nodes: dict[tuple[Any, Any], list[tuple[int, str]]] = {}
        for node, host, rank, why in lost:
            nodes.setdefault((node, host), []).append((rank, why))
        lines = []
        for (node, host), entries in nodes.items():
            ranks = sorted(rank for rank, _ in entries)
            which = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"
            lines.append(f"node {node} (host {host}, {which}) was lost while it started: {entries[0][1]}")
        return lines

    def run(self) -> None:
        pending: dict[socket.socket, tuple[float, bytes]] = {}  # accepted, still in the handshake
        try:
            while not self._stopping.is_set():
                now = time.monotonic()
                for sock in [s for s, (t, _) in pending.items() if now - t > _HANDSHAKE_SECONDS]:
                    pending.pop(sock)
                    sock.close()  # a stranger that says nothing: dropped, the others go on
                readable, _, _ = select.select([self.listener, self._wake_r, *pending, *self.links], [], [], 0.5)
                for sock in readable:
                    if sock is self._wake_r:
                        continue
                    if sock is self.listener:
                        self._accept(pending)
                    elif sock in pending:
                        self._handshake(sock, pending.pop(sock)[1])
                    else:
                        self._watch(sock)
        finally:
            for sock in pending:
                sock.close()

    def _accept(self, pending: dict) -> None:
        try:
            sock, _ = self.listener.accept()
        except OSError:
            return
        try:
            _keepalive(sock)
            nonce = secrets.token_bytes(_NONCE)
            sock.settimeout(_HANDSHAKE_SECONDS)
            sock.sendall(_MAGIC + nonce)
            pending[sock] = (time.monotonic(), nonce)
        except OSError:
            sock.close()

    def _handshake(self, sock: socket.socket, nonce: bytes) -> None:
        # agent → its MAC of our nonce, its own nonce, 4-byte length + JSON; we → our MAC of its nonce
        try:
            proof = _recv_exact(sock, _DIGEST)
            if not hmac.compare_digest(proof, _mac(self.key, b"agent", nonce)):
                raise ConnectionError("wrong key")
            theirs = _recv_exact(sock, _NONCE)
            size = int.from_bytes(_recv_exact(sock, 4), "big")
            if size > 4096:
                raise ConnectionError("oversized check-in")
            said = json.loads(_recv_exact(sock, size))
            rank = int(said["rank"])
            sock.sendall(_mac(self.key, b"head", theirs))
        except (OSError, ConnectionError, ValueError, KeyError, TypeError):
            sock.close()
            return
        with self._lock:
            self.links[sock] = said
            self.checked_in[rank] = said

    def _watch(self, sock: socket.socket) -> None:
        try:
            data = sock.recv(64)
        except OSError as exc:  # keep-alive gave up (ETIMEDOUT), a reset
            why = f"its check-in link failed ({exc.strerror or exc}: the node stopped answering)"
        else:
            if data:
                return  # agents send nothing after the handshake; ignore
            why = "its check-in link closed (the process or its node died)"
        said = self.links.pop(sock)
        sock.close()
        with self._lock:
            self._lost.append((said.get("node", "?"), said.get("host", "?"), int(said["rank"]), why))

    def finish(self, failed: str | None = None) -> None:
        """Every agent joined: say "joined" on each link and close them all. ``failed``: the head
        gives up the start for this reason (one line), which each agent then says as it exits."""
        self._stopping.set()
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        self.join(5.0)
        word = _JOINED if failed is None else _FAILED + failed.replace("\n", " ").encode() + b"\n"
        for sock in list(self.links):
            try:
                sock.sendall(word)
            except OSError:
                pass
            sock.close()
        self.links.clear()
        self.listener.close()
        self._wake_r.close()
        self._wake_w.close()


class CheckinClient(threading.Thread):
    """An agent's end: connects (retrying) until it has checked in, then watches the head until
    :meth:`handover` (the agent joined the session) or the head's "joined".

    ``on_lost(line)`` is called once if the head is lost before that (the cluster runner prints it
    and exits 1)."""

    def __init__(
        self,
        address: tuple[str, int],
        key: bytes,
        said: dict[str, Any],
        on_lost: Callable[[str], None],
        *,
        store: tuple[str, int] | None = None,
    ):
        super().__init__(name="dpbench-cluster-checkin", daemon=True)
        self.address, self.key, self.said, self.on_lost = address, key, said, on_lost
        self.store = store  # torchrun's store, hosted by node 0's torchrun: probed while the port refuses
        self.sock: socket.socket | None = None
        self.state = "connecting"  # → "checked-in" → "joined" | "handed-over" | "refused" | "lost"
        self._handed_over = threading.Event()

    def settle(self, seconds: float) -> None:
        """Called as the agent is interrupted: if the check-in still watches the head, give it up to
        ``seconds`` to notice the head's loss. torchrun stops its workers with SIGTERM when node 0's
        store goes away, so a head's death often brings that signal a moment after the link's end:
        the loss is the reason to say (:func:`leave` exits the process from this thread)."""
        if self.is_alive() and not self._handed_over.is_set():
            self.join(seconds)

    def handover(self) -> None:
        """The agent has joined through the session's own links: a closing check-in link is news no more."""
        self._handed_over.set()

    def run(self) -> None:
        refusals = 0
        last_probe = 0.0
        while self.sock is None:
            if self._handed_over.is_set():
                return  # joined before the check-in got through (the port was late): nothing to watch
            try:
                self.sock = self._connect()
            except PermissionError:  # the head on that port is not ours (or we are not its)
                self.state = "refused"
                return
            except OSError:
                if self.store is not None and time.monotonic() - last_probe >= _STORE_PROBE_SECONDS:
                    last_probe = time.monotonic()
                    refusals = refusals + 1 if _refuses(self.store) else 0
                    if refusals >= _STORE_REFUSALS:
                        self._lose(
                            f"node 0's torchrun is gone: its store at {self.store[0]}:{self.store[1]} refuses "
                            f"connections and the head's check-in port was never reached"
                        )
                        return
                self._handed_over.wait(_RETRY_SECONDS)
        self.state = "checked-in"
        sock = self.sock
        sock.settimeout(None)
        # Read until the head's word or the link's end. After handover a closing link is not acted
        # on (the session's own heartbeats watch the head by then), but it stays open until the
        # head closes it: an agent closing its end would look, to the head, like a node lost.
        received = b""
        try:
            while True:
                try:
                    data = sock.recv(4096)
                except OSError as exc:
                    why = f"its check-in link failed ({exc.strerror or exc}: node 0 stopped answering)"
                    break
                received += data
                if received.startswith(_JOINED):
                    self.state = "joined"
                    return
                if received.startswith(_FAILED) and (not data or received.endswith(b"\n")):
                    if not self._handed_over.is_set():
                        self._lose(
                            "the head (rank 0) gave up the start: " + received[1:].decode(errors="replace").strip()
                        )
                    return
                if not data:
                    why = "its check-in link closed (the process or its node died)"
                    break
        finally:
            sock.close()
        if self._handed_over.is_set():
            self.state = "handed-over"
        else:
            self._lose(f"lost the head (rank 0) while starting: {why}")

    def _lose(self, line: str) -> None:
        self.state = "lost"
        self.on_lost(line)

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(self.address, timeout=1.0)
        try:
            _keepalive(sock)
            sock.settimeout(_HANDSHAKE_SECONDS)
            hello = _recv_exact(sock, len(_MAGIC) + _NONCE)
            if not hello.startswith(_MAGIC):
                raise PermissionError("not a dpbench check-in port")
            nonce = secrets.token_bytes(_NONCE)
            body = json.dumps(self.said).encode()
            sock.sendall(_mac(self.key, b"agent", hello[len(_MAGIC) :]) + nonce + len(body).to_bytes(4, "big") + body)
            try:
                proof = _recv_exact(sock, _DIGEST)
            except ConnectionError:
                raise PermissionError("the head refused our key") from None
            if not hmac.compare_digest(proof, _mac(self.key, b"head", nonce)):
                raise PermissionError("the head's key differs")
            return sock
        except BaseException:
            sock.close()
            raise


def _refuses(address: tuple[str, int]) -> bool:
    """True when nothing listens at ``address`` (connection refused); False when something accepts
    or the answer is anything else (a timeout says nothing: the network may be slow)."""
    try:
        with socket.create_connection(address, timeout=1.0):
            return False
    except ConnectionRefusedError:
        return True
    except OSError:
        return False


# One last line per process: the head's loss (said from the check-in thread) or the main thread's
# "interrupted", never both interleaved (seen in CI: the signal and the link's end came together).
_LAST_WORD = threading.Lock()


def last_word(line: str) -> None:
    """The main thread's last line; waits while :func:`leave` is saying its own (then exits in it)."""
    _LAST_WORD.acquire(timeout=5.0)
    print(line, file=sys.stderr, flush=True)


def leave(line: str) -> None:
    """An agent that lost its head before joining: say it and exit 1 now, whatever the main thread
    is doing (it may be inside torch's import: unwinding through that can abort Python)."""
    _LAST_WORD.acquire(timeout=5.0)  # never released: the process ends below
    print(line, file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(1)
