"""Idle and slow connections cannot lock the operator out of the HTTP endpoint: a crowd of
clients without the token holding every connection slot (re-opening each one the server closes),
idle or sending one header byte every few seconds, while the real ``pumpd status`` and a
token-bearing GET must be answered every time, and what the configuration opens (the status
page, ``--metrics-open``) too. Against real daemons (``pumpd_daemon``)."""

from __future__ import annotations

import http.client
import os
import selectors
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from pumpd import exitcodes
from pumpd.cli.client import Endpoint, request
from pumpd.http.server import MAX_CONNECTIONS

from tests.support.daemon_helpers import Daemon

ATTACK_SECONDS = 6.0  # how long each check runs its requests while the crowd holds the slots


ANSWER_TIMEOUT = 5.0  # a request under attack must be answered within this (the CLI's own)


class Crowd(threading.Thread):
    """Keeps ``size`` connections to the endpoint open, each opened again as soon as the server
    closes it. ``slow``: each sends a request line and then one header byte every ``drip``
    seconds, never finishing its head (slowloris). ``tls``: each completes a TLS handshake
    first. Nothing it sends carries the token."""

    def __init__(self, port: int, size: int, slow: bool = False,
                 tls: ssl.SSLContext | None = None, drip: float = 2.0) -> None:
        super().__init__(name="crowd", daemon=True)
        self.port, self.size, self.slow, self.tls, self.drip = port, size, slow, tls, drip
        self.opened = 0  # connections opened, first ones included
        self.holding = 0  # open right now
        self.most = 0  # the most held open at once
        self._halt = threading.Event()
        self._selector = selectors.DefaultSelector()

    def _open(self) -> None:
        try:
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            if self.tls is not None:
                sock = self.tls.wrap_socket(sock, server_hostname="127.0.0.1")
            if self.slow:
                sock.sendall(f"GET /api/shovels HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
                             "X-Slow: ".encode())
            sock.setblocking(False)
        except OSError:
            return  # refused or closed at once: opened again on the next round
        self._selector.register(sock, selectors.EVENT_READ)
        self.opened += 1

    def _closed(self, sock: socket.socket) -> None:
        self._selector.unregister(sock)
        sock.close()

    def run(self) -> None:
        next_drip = time.monotonic() + self.drip
        while not self._halt.is_set():
            for _ in range(self.size - len(self._selector.get_map())):
                self._open()
            self.holding = len(self._selector.get_map())
            self.most = max(self.most, self.holding)
            for key, _ in self._selector.select(timeout=0.05):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    data = sock.recv(65536)
                except (BlockingIOError, ssl.SSLWantReadError):
                    continue
                except OSError:
                    data = b""
                if not data:  # the server closed it: open another
                    self._closed(sock)
                # an answer (a 503): the server closes the connection next
            if self.slow and time.monotonic() >= next_drip:
                next_drip += self.drip
                for key in list(self._selector.get_map().values()):
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    try:
                        sock.send(b"a")
                    except (BlockingIOError, ssl.SSLWantWriteError):
                        pass
                    except OSError:
                        self._closed(sock)
        for key in list(self._selector.get_map().values()):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            self._closed(sock)

    def stop(self) -> None:
        self._halt.set()
        self.join(10)

    def wait_full(self, timeout: float = 15) -> None:
        """Until the crowd has held every slot of the endpoint at once."""
        deadline = time.monotonic() + timeout
        while self.most < min(self.size, MAX_CONNECTIONS):
            assert time.monotonic() < deadline, f"the crowd held {self.most} connections at most"
            time.sleep(0.05)
        time.sleep(0.5)  # the server has read them all


def get(d: Daemon, path: str, token: bool = True,
        context: ssl.SSLContext | None = None) -> tuple[int, bytes]:
    """One GET, answered within ``ANSWER_TIMEOUT`` or an error."""
    conn: http.client.HTTPConnection
    if context is not None:
        conn = http.client.HTTPSConnection("127.0.0.1", d.port, timeout=ANSWER_TIMEOUT,
                                           context=context)
    else:
        conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=ANSWER_TIMEOUT)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {d.token()}"}
                     if token else {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def pumpd_status(d: Daemon) -> subprocess.CompletedProcess[str]:
    """The real CLI client: its own request timeout (5 s) bounds the answer."""
    return subprocess.run(
        [sys.executable, "-m", "pumpd", "status", "--http", f"127.0.0.1:{d.port}"],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        env={**os.environ, "PUMPD_TOKEN_FILE": str(d.token_path)})


def served_throughout(d: Daemon, crowd: Crowd, *checks: tuple[str, bool],
                      context: ssl.SSLContext | None = None, cli: bool = True) -> int:
    """Runs ``pumpd status`` and each ``(path, with the token)`` GET again and again for
    ``ATTACK_SECONDS`` while the crowd holds the endpoint; every one must be answered 200.
    Returns the rounds run."""
    crowd.wait_full()
    rounds, deadline = 0, time.monotonic() + ATTACK_SECONDS
    while time.monotonic() < deadline or rounds < 3:
        if cli:
            result = pumpd_status(d)
            assert result.returncode == exitcodes.OK, (rounds, result.stderr)
            assert "no shovels" in result.stdout
        for path, token in checks:
            status, body = get(d, path, token, context)
            assert status == 200, (rounds, path, status, body[:300])
        rounds += 1
        assert crowd.is_alive()
    return rounds


@pytest.mark.parametrize("slow", [False, True], ids=["idle", "slowloris"])
def test_idle_or_slow_connections_do_not_lock_out_the_token(pumpd_daemon, slow: bool) -> None:
    d = pumpd_daemon({})
    crowd = Crowd(d.port, MAX_CONNECTIONS + 16, slow=slow)
    crowd.start()
    try:
        served_throughout(d, crowd, ("/api/shovels", True), ("/metrics", True))
        assert crowd.holding >= MAX_CONNECTIONS - 4  # the attack went on all along
    finally:
        crowd.stop()
    # each room made was counted, and said in a WARNING line (not one line per connection)
    status, text = get(d, "/metrics")
    evicted = [line for line in text.decode().splitlines()
               if line.startswith("pumpd_http_connections_evicted_total ")]
    assert status == 200 and len(evicted) == 1 and int(evicted[0].split()[1]) > 0, evicted
    warnings = [e for e in d.log_events() if "room" in str(e.get("message", ""))]
    assert warnings and all(e["level"] == "warning" for e in warnings), warnings
    assert len(warnings) <= 2, warnings  # rate-limited: the attack lasted seconds


def test_the_crowd_does_not_lock_out_what_is_open(pumpd_daemon) -> None:
    d = pumpd_daemon({}, "--metrics-open")
    crowd = Crowd(d.port, MAX_CONNECTIONS)
    crowd.start()
    try:
        served_throughout(d, crowd, ("/", False), ("/metrics", False), cli=False)
    finally:
        crowd.stop()


def test_the_crowd_does_not_lock_out_the_token_over_tls(pumpd_daemon, tmp_path: Path) -> None:
    from tests.support.tls_helpers import self_signed

    cert, key = self_signed(tmp_path)
    d = pumpd_daemon({}, "--http-tls-cert", str(cert), "--http-tls-key", str(key), start=False)
    d.scheme = "https"
    d.context = ssl.create_default_context(cafile=str(cert))
    d.start()
    crowd = Crowd(d.port, MAX_CONNECTIONS, tls=d.context)
    crowd.start()
    try:
        served_throughout(d, crowd, ("/api/shovels", True), context=d.context)
    finally:
        crowd.stop()


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closed ``sock`` (a non-blocking socket it sent nothing on)."""
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def hold_every_slot(d: Daemon) -> list[socket.socket]:
    """Fills the endpoint with admitted requests that carry the token (PUTs whose bodies never
    come; the server closes them after its READ_TIMEOUT) until a GET is answered 503."""
    head = (f"PUT /api/shovels/held HTTP/1.1\r\nHost: 127.0.0.1:{d.port}\r\n"
            f"Authorization: Bearer {d.token()}\r\nContent-Length: 100\r\n\r\n{{").encode()
    held: list[socket.socket] = []

    def top_up() -> None:
        """Up to every slot (a GET that came before the server had read one's head took its
        slot, or its time ran out: that one is closed and held again)."""
        for sock in [s for s in held if closed_by_server(s)]:
            held.remove(sock)
            sock.close()
        while len(held) < MAX_CONNECTIONS:
            sock = socket.create_connection(("127.0.0.1", d.port), timeout=10)
            sock.sendall(head)
            sock.setblocking(False)  # for closed_by_server's look
            held.append(sock)

    try:
        top_up()
        deadline = time.monotonic() + 30
        while True:
            time.sleep(0.2)  # for the server to read the heads just sent
            status, body = get(d, "/api/overview")
            if status == 503 or time.monotonic() > deadline:
                break
            top_up()
        assert status == 503 and f"at most {MAX_CONNECTIONS}".encode() in body, body
        assert not any(closed_by_server(sock) for sock in held)  # none closed to make room
    except BaseException:
        for sock in held:
            sock.close()
        raise
    return held


def test_only_requests_with_the_token_fill_the_endpoint_to_a_503(pumpd_daemon) -> None:
    """The bound stays: when every slot holds an admitted request with the token (here PUTs
    whose bodies are still coming), a new connection is answered 503 and closed."""
    d = pumpd_daemon({})
    for sock in hold_every_slot(d):
        sock.close()
    deadline = time.monotonic() + 10
    while get(d, "/api/overview")[0] != 200:
        assert time.monotonic() < deadline, "not served again once the slots were free"
        time.sleep(0.1)


def test_the_client_asks_again_while_the_endpoint_is_full(pumpd_daemon) -> None:
    """``pumpd status``'s request is asked again after a 503 "too many connections" (nothing of
    it was read), until its timeout: answered once a slot is free."""
    d = pumpd_daemon({})
    held = hold_every_slot(d)
    answers: list[object] = []
    asking = threading.Thread(target=lambda: answers.append(request(
        Endpoint(f"http://127.0.0.1:{d.port}", d.token()), "GET", "/api/overview", timeout=15)))
    try:
        asked_at = time.monotonic()
        asking.start()
        time.sleep(1.0)  # refused at least once by then
    finally:
        for sock in held:
            sock.close()
    asking.join(20)
    assert answers and isinstance(answers[0], dict) and answers[0]["product"] == "pumpd", answers
    assert time.monotonic() - asked_at >= 1.0


def test_tls_handshakes_are_counted_against_the_bound(pumpd_daemon, tmp_path: Path) -> None:
    """Connections that never start their TLS handshake hold slots like any other: the daemon's
    open sockets stay within the bound however many there are."""
    from tests.support.tls_helpers import self_signed

    cert, key = self_signed(tmp_path)
    d = pumpd_daemon({}, "--http-tls-cert", str(cert), "--http-tls-key", str(key), start=False)
    d.scheme = "https"
    d.context = ssl.create_default_context(cafile=str(cert))
    d.start()

    def sockets() -> int:
        count = 0
        for fd in Path(f"/proc/{d.pid}/fd").iterdir():
            try:
                count += os.readlink(fd).startswith("socket:")
            except FileNotFoundError:  # closed by the daemon between the listing and the read
                pass
        return count

    before = sockets()
    silent = []
    try:
        for _ in range(4 * MAX_CONNECTIONS):
            silent.append(socket.create_connection(("127.0.0.1", d.port), timeout=10))
        time.sleep(1.0)  # accepted, and each newcomer made room
        assert sockets() <= before + MAX_CONNECTIONS + 8, (before, sockets())
        assert get(d, "/api/shovels", context=d.context)[0] == 200
    finally:
        for sock in silent:
            sock.close()

