"""A hostile peer (pumpd.testing.hostile) against real pumpd processes: a daemon whose shovel's
source is the peer and whose destination is a private node, and a Publisher whose broker is
the peer. Every crafted frame ends in connection.close 501 FRAME_ERROR with a one-line reason,
nothing is published, and nothing is buffered beyond frame_max; on both data planes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pumpd.testing.hostile import (
    HostilePeer,
    basic_deliver,
    body,
    content_header,
    frame,
    method,
    shortstr,
)
from pumpd.testing.localnode import LocalNode

from tests.support.amqp_helpers import queue_depth
from tests.support.daemon_helpers import Daemon, shovel_def
from tests.support.hostile_limits import FLOOD, MARKER, RSS_LIMIT_KB, close_of, marker

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def impl(impl: str, monkeypatch: pytest.MonkeyPatch) -> str:
    # read by pumpd.dataplane.implementation in every process the daemon starts
    monkeypatch.setenv("PUMPD_IMPLEMENTATION", impl)
    return impl


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


def _shovel(peer: HostilePeer, node: LocalNode, vhost: str) -> dict[str, Any]:
    return shovel_def(peer.uri(), "in", node.uri(vhost), "out", reconnect_delay=5)


def _worker_reason(d: Daemon) -> str:
    (w,) = d.shovel("h")["workers"]  # type: ignore[index]
    return str(w["reason"] or "")


def _started(d: Daemon, impl: str) -> None:
    d.wait_for(lambda: d.shovel("h")["workers"][0]["implementation"] == impl, 30,  # type: ignore[index]
               f"the worker on the {impl} data plane")


def test_an_oversized_frame_closes_the_source_at_once_and_buffers_nothing(
        pumpd_daemon: Any, node_b: LocalNode, vhost_b: str, impl: str) -> None:
    # a message begins, then a body frame announcing 0xFFFFFFF0 bytes, streamed
    crafted = (basic_deliver(1, 1) + content_header(1, 100)
               + frame(3, 1, b"", size=0xFFFFFFF0, end=b""))
    with HostilePeer(after_consume=crafted, flood=FLOOD) as peer:
        d = pumpd_daemon({"h": _shovel(peer, node_b, vhost_b)})
        code, text = close_of(peer)
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
    with HostilePeer(after_consume=good + crafted + marker(1)) as peer:
        d = pumpd_daemon({"h": _shovel(peer, node_b, vhost_b)})
        code, text = close_of(peer)
        assert code == 501 and text.startswith(f"FRAME_ERROR - {reason}")
        status = d.wait_for(lambda: "501 FRAME_ERROR" in _worker_reason(d) and _worker_reason(d),
                            30, "the reason in the status")
        assert reason in status and "\n" not in status and MARKER.decode() not in status
        assert "Traceback" not in d.log(400)

