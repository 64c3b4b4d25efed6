"""pumpd.testing.TcpProxy against a local echo server."""

from __future__ import annotations

import os
import socket
import socketserver
import struct
import threading
import time
from collections.abc import Iterator

import pytest
from pumpd.testing import TcpProxy


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        server: EchoServer = self.server  # type: ignore[assignment]
        try:
            while data := self.request.recv(65536):
                if data == b"reset, please":
                    server.endings.append("reset by the server")  # before the peer can see it
                    self.request.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                            struct.pack("ii", 1, 0))
                    self.request.close()
                    return
                self.request.sendall(data)
            server.endings.append("eof")
        except ConnectionResetError:
            server.endings.append("reset")


class EchoServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Echo)
        self.endings: list[str] = []  # how each connection ended, as the server saw it

    @property
    def port(self) -> int:
        return int(self.server_address[1])


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def proxy(echo: EchoServer) -> Iterator[TcpProxy]:
    with TcpProxy("127.0.0.1", echo.port) as p:
        yield p


def connect(proxy: TcpProxy) -> socket.socket:
    sock = socket.create_connection((proxy.host, proxy.port), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise AssertionError(f"EOF after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def wait_until(predicate: object, timeout: float = 30, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def test_bytes_pass_intact_both_ways_and_are_counted(proxy: TcpProxy) -> None:
    payload = os.urandom(3 * 1024 * 1024 + 17)
    with connect(proxy) as sock:
        # A writer thread: the echo comes back while we are still sending.
        writer = threading.Thread(target=sock.sendall, args=(payload,))
        writer.start()
        got = recv_exactly(sock, len(payload))
        writer.join()
        assert got == payload
        assert proxy.connections == 1
    wait_until(lambda: proxy.connections == 0, what="the connection to end")
    assert (proxy.bytes_up, proxy.bytes_down) == (len(payload), len(payload))


def test_an_eof_is_passed_on_after_the_data(proxy: TcpProxy, echo: EchoServer) -> None:
    with connect(proxy) as sock:
        sock.sendall(b"last words")
        sock.shutdown(socket.SHUT_WR)
        assert recv_exactly(sock, 10) == b"last words"
        assert sock.recv(10) == b""  # the server saw our EOF, ended, and its FIN came back
    wait_until(lambda: echo.endings == ["eof"], what="the server to see the EOF")


def test_reset_all_resets_both_peers(proxy: TcpProxy, echo: EchoServer) -> None:
    socks = [connect(proxy) for _ in range(3)]
    for s in socks:
        s.sendall(b"ping")
        assert recv_exactly(s, 4) == b"ping"
    assert proxy.connections == 3
    assert proxy.reset_all() == 3
    for s in socks:
        with pytest.raises(ConnectionResetError):
            s.recv(10)
        s.close()
    wait_until(lambda: len(echo.endings) == 3, what="the server's connections to end")
    assert echo.endings == ["reset"] * 3
    assert proxy.connections == 0
    with connect(proxy) as s:  # the proxy itself keeps accepting
        s.sendall(b"again")
        assert recv_exactly(s, 5) == b"again"


def test_a_reset_from_the_target_reaches_the_client(proxy: TcpProxy, echo: EchoServer) -> None:
    with connect(proxy) as sock:
        sock.sendall(b"reset, please")
        with pytest.raises(ConnectionResetError):
            sock.recv(10)
    assert echo.endings == ["reset by the server"]
    wait_until(lambda: proxy.connections == 0, what="the proxy to drop the connection")


def test_stall_holds_bytes_then_delivers_them_in_order(proxy: TcpProxy) -> None:
    with connect(proxy) as sock:
        sock.sendall(b"before")
        assert recv_exactly(sock, 6) == b"before"
        began = time.monotonic()
        proxy.stall(1.0)
        chunks = [b"%06d" % i for i in range(500)]
        for c in chunks:
            sock.sendall(c)
        assert recv_exactly(sock, 6 * 500) == b"".join(chunks)
        assert time.monotonic() - began >= 1.0
        assert proxy.connections == 1  # held, not dropped


def test_stall_mode_holds_everything_until_pass(proxy: TcpProxy) -> None:
    with connect(proxy) as sock:
        sock.sendall(b"x")
        assert recv_exactly(sock, 1) == b"x"
        up, down = proxy.bytes_up, proxy.bytes_down
        proxy.set_mode("stall")
        sock.sendall(b"held")
        sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            sock.recv(10)
        assert (proxy.bytes_up, proxy.bytes_down) == (up, down)
        proxy.set_mode("pass")
        sock.settimeout(30)
        assert recv_exactly(sock, 4) == b"held"


def test_stall_open_silences_the_open_connections_for_good_and_lets_new_ones_pass(
        proxy: TcpProxy) -> None:
    with connect(proxy) as old:
        old.sendall(b"x")
        assert recv_exactly(old, 1) == b"x"
        assert proxy.stall_open() == 1
        old.sendall(b"held")
        proxy.set_mode("pass")  # does not wake a silent connection
        with connect(proxy) as new:
            new.sendall(b"new")
            assert recv_exactly(new, 3) == b"new"
        old.settimeout(0.5)
        with pytest.raises(TimeoutError):
            old.recv(10)


def test_a_long_stall_pushes_back_on_the_sender_and_loses_nothing(proxy: TcpProxy) -> None:
    # More than the proxy holds before it stops reading (4 MiB): reading pauses and resumes.
    payload = os.urandom(12 * 1024 * 1024)
    with connect(proxy) as sock:
        proxy.set_mode("stall")
        writer = threading.Thread(target=sock.sendall, args=(payload,))
        writer.start()
        wait_until(lambda: proxy.connections == 1, what="the connection")
        time.sleep(0.5)  # let the sender fill the proxy and the socket buffers
        assert proxy.bytes_up == 0
        proxy.set_mode("pass")
        assert recv_exactly(sock, len(payload)) == payload
        writer.join()


def test_delay_adds_at_least_twice_the_one_way_delay_to_a_round_trip(echo: EchoServer) -> None:
    with TcpProxy("127.0.0.1", echo.port, delay_ms=40) as proxy, connect(proxy) as sock:
        rtts = []
        for i in range(5):
            began = time.monotonic()
            sock.sendall(b"%d" % i)
            assert recv_exactly(sock, 1) == b"%d" % i
            rtts.append(time.monotonic() - began)
        assert min(rtts) >= 0.080, rtts
        proxy.set_delay_ms(0)
        sock.sendall(b"z")
        assert recv_exactly(sock, 1) == b"z"


def test_delay_keeps_order_of_pipelined_writes(echo: EchoServer) -> None:
    with TcpProxy("127.0.0.1", echo.port, delay_ms=2.5) as proxy, connect(proxy) as sock:
        chunks = [b"%05d" % i for i in range(5000)]
        writer = threading.Thread(target=lambda: [sock.sendall(c) for c in chunks])
        writer.start()
        got = recv_exactly(sock, 5 * len(chunks))
        writer.join()
        assert got == b"".join(chunks)


def test_reset_on_accept_resets_new_connections_only(proxy: TcpProxy, echo: EchoServer) -> None:
    with connect(proxy) as old:
        old.sendall(b"a")
        assert recv_exactly(old, 1) == b"a"
        proxy.set_mode("reset-on-accept")
        # On loopback the reset can beat connect() back to the caller.
        with pytest.raises(ConnectionResetError), connect(proxy) as new:
            new.recv(10)
        old.sendall(b"b")
        assert recv_exactly(old, 1) == b"b"
    assert proxy.accepted == 2


def test_refuse_closes_new_connections_at_once(proxy: TcpProxy) -> None:
    proxy.set_mode("refuse")
    with connect(proxy) as sock:
        assert sock.recv(10) == b""
    proxy.set_mode("pass")
    with connect(proxy) as sock:
        sock.sendall(b"ok")
        assert recv_exactly(sock, 2) == b"ok"


def test_a_proxy_never_started_stops_quietly() -> None:
    proxy = TcpProxy("127.0.0.1", 9)
    proxy.stop()
    with pytest.raises(RuntimeError):
        _ = proxy.port


def test_an_unreachable_target_resets_the_client() -> None:
    with socket.socket() as placeholder:
        placeholder.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        port = placeholder.getsockname()[1]
        with TcpProxy("127.0.0.1", port) as proxy, pytest.raises(ConnectionResetError), \
                connect(proxy) as sock:
            sock.recv(10)

