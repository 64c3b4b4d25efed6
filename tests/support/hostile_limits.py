"""What a hostile peer's tests share: the size an oversized frame announces, the memory bound a
client must stay under while refusing it, the method frame that must never be read, and the
``connection.close`` a peer received."""

from __future__ import annotations

from pumpd.testing.hostile import (
    HostilePeer,
    method,
)

FLOOD = 400 << 20  # what an oversized frame's header announces is streamed, up to 400 MiB


RSS_LIMIT_KB = 100 * 1024


MARKER = b"MARKER-outside-the-frame"


def marker(channel: int) -> bytes:
    return method(channel, 10, 10, MARKER * 4)


def close_of(peer: HostilePeer) -> tuple[int, str]:
    peer.wait_for(lambda: peer.connections and peer.connections[0].ended_at is not None, 30,
                  "the first connection to end")
    first = peer.connections[0]
    assert first.close is not None, f"the connection ended without connection.close: {first}"
    return first.close

