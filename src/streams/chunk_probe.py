"""A stream's tail, and the header of the chunk that holds an offset, read over the streams
protocol from asyncio: subscribe at an offset specification with credit 1, take the first
``Deliver`` frame, read its chunk header (:func:`~pumpd.streams.wire.chunk_head`: first offset,
entries, records, when it was written) without decoding a message, unsubscribe.

A subscription starts at the chunk that holds its offset, so the chunk delivered for
``offset N`` holds N, or comes after it when retention removed N; a chunk that ends before N is
a lie, and closes the connection (:class:`~pumpd.streams.errors.PeerViolation`). A stream with
nothing at or after the specification (an empty stream's ``last``, an offset past its end)
delivers nothing: None once ``wait`` seconds have passed.
"""

from __future__ import annotations

import asyncio

from .client import StreamsClient
from .errors import PeerViolation, StreamsError
from .wire import LAST, OFFSET, ChunkHead, Malformed, chunk_head

__all__ = ["chunk_at", "last_offset"]


async def chunk_at(client: StreamsClient, stream: str, kind: int, value: int = 0, *,
                   wait: float) -> ChunkHead | None:
    """The header of the first chunk a subscription at ``kind`` / ``value`` (an offset
    specification of ``streams/wire.py``) is sent, or None when none comes within ``wait``
    seconds.

    :raises StreamsError: the broker refused (by code), or the connection ended
    :raises PeerViolation: the chunk's header does not fit its frame, or its offsets lie (the
        connection is closed)
    """
    loop = asyncio.get_running_loop()
    got: asyncio.Future[bytes] = loop.create_future()

    def delivered(data: bytes) -> None:
        if not got.done():
            got.set_result(data)

    subscription = client.free_subscription()
    await client.subscribe(subscription, stream, kind, value, credit=1, on_deliver=delivered)
    waiting: set[asyncio.Future[object]] = {got, client.closed}  # type: ignore[arg-type]
    try:
        await asyncio.wait(waiting, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        client.abort()  # cancelled between a request and its answer: the connection is unsure
        raise
    if not got.done():
        got.cancel()
        if client.closed.done():
            error = client.closed.result()
            if isinstance(error, StreamsError):
                raise error  # a peer's violation stays one
            raise StreamsError(f"{error} (while reading stream {stream!r})")
        await client.unsubscribe(subscription)
        return None
    head = _checked(client, stream, got.result(), kind, value)
    await client.unsubscribe(subscription)
    return head


def _checked(client: StreamsClient, stream: str, data: bytes, kind: int, value: int
             ) -> ChunkHead:
    """The chunk header of a Deliver frame, its sizes and offsets checked; a lie closes the
    connection."""
    try:
        head = chunk_head(data)
    except Malformed as exc:
        what = f"a malformed Deliver frame for stream {stream!r}: {exc}"
        client.fail(what)
        raise PeerViolation(f"{client.where}: {what}") from None
    if kind == OFFSET and head.last < value:
        what = (f"the peer delivered the chunk of offsets {head.first} to {head.last} of "
                f"stream {stream!r} for offset {value}, which that chunk does not hold")
        client.fail(what)
        raise PeerViolation(f"{client.where}: {what}")
    return head

async def last_offset(client: StreamsClient, stream: str, *, wait: float) -> int | None:
    """The offset of the last message in ``stream`` (its last chunk's last record), or None
    when it holds none.

    :raises StreamsError: as :func:`chunk_at`
    """
    head = await chunk_at(client, stream, LAST, wait=wait)
    return None if head is None else head.last
