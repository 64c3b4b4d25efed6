"""A hostile peer (pumpd.testing.hostile) against real pumpd processes: a daemon whose shovel's
source is the peer and whose destination is a private node, and a Publisher whose broker is
the peer. Every crafted frame ends in connection.close 501 FRAME_ERROR with a one-line reason,
nothing is published, and nothing is buffered beyond frame_max; on both data planes."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from pumpd import Publisher, PublishError
from pumpd.engine.link import LinkError
from pumpd.testing.hostile import (
    HostilePeer,
    basic_deliver,
    basic_return,
    body,
    content_header,
    frame,
    method,
    shortstr,
)
from pumpd.testing.localnode import LocalNode

from tests.support.amqp_helpers import queue_depth
from tests.support.daemon_helpers import Daemon, shovel_def
from tests.support.impls import IMPLEMENTATIONS, native

pytestmark = pytest.mark.timeout(180)

FLOOD = 400 << 20  # what an oversized frame's header announces is streamed, up to 400 MiB
RSS_LIMIT_KB = 100 * 1024
MARKER = b"MARKER-outside-the-frame"


def _marker(channel: int) -> bytes:
    return method(channel, 10, 10, MARKER * 4)


@pytest.fixture(params=IMPLEMENTATIONS)
def impl(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "native":
        native()
    # read by pumpd.dataplane.implementation in every process the daemon starts
    monkeypatch.setenv("PUMPD_IMPLEMENTATION", request.param)
    return str(request.param)


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


def _close_of(peer: HostilePeer) -> tuple[int, str]:
    peer.wait_for(lambda: peer.connections and peer.connections[0].ended_at is not None, 30,
                  "the first connection to end")
    first = peer.connections[0]
    assert first.close is not None, f"the connection ended without connection.close: {first}"
    return first.close


def _shovel(peer: HostilePeer, node: LocalNode, vhost: str) -> dict[str, Any]:
    return shovel_def(peer.uri(), "in", node.uri(vhost), "out", reconnect_delay=5)


def _worker_reason(d: Daemon) -> str:
    (w,) = d.shovel("h")["workers"]  # type: ignore[index]
    return str(w["reason"] or "")


def _started(d: Daemon, impl: str) -> None:
    d.wait_for(lambda: d.shovel("h")["workers"][0]["implementation"] == impl, 30,  # type: ignore[index]
               f"the worker on the {impl} data plane")


# -- a shovel whose source is hostile ------------------------------------------------------------


def test_an_oversized_frame_closes_the_source_at_once_and_buffers_nothing(
        pumpd_daemon: Any, node_b: LocalNode, vhost_b: str, impl: str) -> None:
    # a message begins, then a body frame announcing 0xFFFFFFF0 bytes, streamed
    crafted = (basic_deliver(1, 1) + content_header(1, 100)
               + frame(3, 1, b"", size=0xFFFFFFF0, end=b""))
    with HostilePeer(after_consume=crafted, flood=FLOOD) as peer:
        d = pumpd_daemon({"h": _shovel(peer, node_b, vhost_b)})
        code, text = _close_of(peer)
        first = peer.connections[0]
        assert first.crafted_at is not None and first.ended_at is not None
        took = first.ended_at - first.crafted_at
        assert took < 1.0, f"the connection stayed open {took:.2f} s after the frame"
        assert code == 501
        assert text.startswith("FRAME_ERROR - a frame of 4294967288 bytes (type 3, channel 1) "
                               "exceeds the negotiated frame_max 131072")
        assert first.flooded < FLOOD
        _started(d, impl)
        (pid,) = d.worker_pids("h")
        rss = _rss_kb(pid)
        assert rss < RSS_LIMIT_KB, f"worker RSS {rss} kB"
        reason = d.wait_for(lambda: "501 FRAME_ERROR" in _worker_reason(d) and _worker_reason(d),
                            30, "the reason in the status")
        assert "\n" not in reason and "exceeds the negotiated frame_max 131072" in reason
        assert "closed by pumpd with 501 FRAME_ERROR: a frame of 4294967288 bytes" in d.log(400)
        assert queue_depth(node_b.uri(vhost_b), "out")[0] == 0


SOURCE_CASES = [
    ("short content header", basic_deliver(1, 1) + frame(2, 1, b"\x00\x3c\x00\x00\x00"),
     "content header of 5 bytes"),
    ("lying exchange length", method(1, 60, 60, shortstr("ctag") + bytes(9)
                                     + shortstr("ex", length=250) + shortstr("rk")),
     "basic.deliver truncated"),
    ("body_size 2^63", basic_deliver(1, 1) + content_header(1, 1 << 63),
     "a content header announces a body of 9223372036854775808 bytes"),
]


@pytest.mark.parametrize(("name", "crafted", "reason"), SOURCE_CASES,
                         ids=[c[0] for c in SOURCE_CASES])
def test_a_malformed_delivery_ends_in_a_clean_error(
        pumpd_daemon: Any, node_b: LocalNode, vhost_b: str, impl: str, name: str,
        crafted: bytes, reason: str) -> None:
    # a whole valid message first, then the bad frame: the connection closes all the same
    good = basic_deliver(1, 1) + content_header(1, 2) + body(1, b"ok")
    with HostilePeer(after_consume=good + crafted + _marker(1)) as peer:
        d = pumpd_daemon({"h": _shovel(peer, node_b, vhost_b)})
        code, text = _close_of(peer)
        assert code == 501 and text.startswith(f"FRAME_ERROR - {reason}")
        status = d.wait_for(lambda: "501 FRAME_ERROR" in _worker_reason(d) and _worker_reason(d),
                            30, "the reason in the status")
        assert reason in status and "\n" not in status and MARKER.decode() not in status
        assert "Traceback" not in d.log(400)


# -- a Publisher whose broker is hostile ----------------------------------------------------------


PUBLISHER_CASES = [
    ("lying reply_text", basic_return(1, 312, shortstr("NO_ROUTE", length=255), shortstr("x"),
                                      shortstr("rk")), "basic.return truncated"),
    ("lying routing key", basic_return(1, 312, shortstr("NO_ROUTE"), shortstr(""),
                                       shortstr("rk", length=90)), "basic.return truncated"),
    ("short header after a return", basic_return(1, 312, shortstr("NO_ROUTE"), shortstr(""),
                                                 shortstr("rk")) + frame(2, 1, b"\x00\x3c"),
     "content header of 2 bytes"),
    ("4-byte ack", method(1, 60, 80), "basic.ack truncated"),
    ("frame_max + 1", frame(1, 0, bytes(131072 - 7)),
     "a frame of 131073 bytes (type 1, channel 0) exceeds the negotiated frame_max 131072"),
]


@pytest.mark.parametrize(("name", "crafted", "reason"), PUBLISHER_CASES,
                         ids=[c[0] for c in PUBLISHER_CASES])
def test_a_publisher_facing_a_hostile_broker_raises_a_clean_error(
        impl: str, name: str, crafted: bytes, reason: str) -> None:
    with HostilePeer(after_publish=crafted + _marker(1)) as peer:
        p = Publisher(peer.uri(), routing_key="q", mode="individual", mandatory=True,
                      confirm_timeout=20, implementation=impl)
        try:
            with pytest.raises(PublishError) as caught:
                p.publish(b"hello")
        finally:
            p.abort()
        message = str(caught.value)
        assert f"closed by pumpd with 501 FRAME_ERROR: {reason}" in message
        assert "\n" not in message and MARKER.decode() not in message
        assert caught.value.returned == [] and caught.value.unconfirmed == [1]
        assert _close_of(peer) == (501, f"FRAME_ERROR - {reason}")


def test_a_publisher_facing_an_oversized_frame_buffers_nothing(impl: str) -> None:
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with HostilePeer(after_publish=frame(3, 1, b"", size=0xFFFFFFF0, end=b""),
                     flood=FLOOD) as peer:
        p = Publisher(peer.uri(), routing_key="q", mode="individual", confirm_timeout=20,
                      implementation=impl)
        start = time.monotonic()
        try:
            with pytest.raises(PublishError, match="501 FRAME_ERROR: a frame of 4294967288 bytes"):
                p.publish(b"hello")
        finally:
            p.abort()
        assert time.monotonic() - start < 5
        _close_of(peer)
        assert peer.connections[0].flooded < FLOOD
    grown_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kb < RSS_LIMIT_KB, f"the test process grew by {grown_kb} kB"


def test_an_oversized_frame_during_the_handshake_is_refused_before_pika_buffers_it(
        impl: str) -> None:
    """Before a data plane takes the stream over (handshake, declarations), the link's frame
    guard checks every header: a connection.start announcing 0xFFFFFFF0 bytes."""
    with HostilePeer(instead_of_start=frame(1, 0, b"", size=0xFFFFFFF0, end=b""),
                     flood=FLOOD) as peer:
        with pytest.raises(LinkError) as caught:
            Publisher(peer.uri(), implementation=impl)
        assert str(caught.value) == (
            f"cannot connect to amqp://guest@127.0.0.1:{peer.port}/%2F: closed by pumpd with 501 "
            "FRAME_ERROR: a frame of 4294967288 bytes (type 1, channel 0) exceeds the "
            "negotiated frame_max 131072")
        code, text = _close_of(peer)
        assert code == 501 and text.startswith("FRAME_ERROR - a frame of 4294967288 bytes")
        assert peer.connections[0].flooded < FLOOD
