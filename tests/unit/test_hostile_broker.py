"""A Publisher whose broker is a hostile peer (pumpd.testing.hostile), in this process: every
crafted frame ends in a clean error and nothing is buffered beyond frame_max; on both data
planes."""

from __future__ import annotations

import time

import pytest
from pumpd import Publisher, PublishError
from pumpd.engine.link import LinkError
from pumpd.testing.hostile import (
    HostilePeer,
    basic_return,
    frame,
    method,
    shortstr,
)

from tests.support.hostile_limits import FLOOD, MARKER, RSS_LIMIT_KB, close_of, marker

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def impl(impl: str, monkeypatch: pytest.MonkeyPatch) -> str:
    # read by pumpd.dataplane.implementation in every process the daemon starts
    monkeypatch.setenv("PUMPD_IMPLEMENTATION", impl)
    return impl


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
    with HostilePeer(after_publish=crafted + marker(1)) as peer:
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
        assert close_of(peer) == (501, f"FRAME_ERROR - {reason}")


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
        close_of(peer)
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
        code, text = close_of(peer)
        assert code == 501 and text.startswith("FRAME_ERROR - a frame of 4294967288 bytes")
        assert peer.connections[0].flooded < FLOOD

