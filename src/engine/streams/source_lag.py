"""A stream source's lag, read over the streams protocol on the source node: its last offset,
and when the chunk that holds the first offset not yet forwarded was written.

An AMQP 0-9-1 consumer of a stream cannot see where the stream ends (a passive declare answers
with what the stream retains). The streams protocol can: a subscription at ``last`` is sent the
stream's last chunk first, and one at ``offset N`` the chunk that holds N; their headers say
the offsets they hold and when they were written (``pumpd.streams.chunk_probe``). A reading
reads one or two chunk headers on a connection to the source URI's host at the streams port
(``source_stream_port``: 5552, or 5551 with amqps).

The connection is held from one reading to the next, its heartbeats keeping it, so that a shovel
read every few seconds does not open and close a connection on the broker each time. A reading
that fails or is cancelled drops it (its state is then unsure), and the next reading opens
another. :meth:`StreamSourceLag.close` lets it go: when the readings stop (the position paused,
standing by, ended) or move to another node.

A reading that fails (the port closed, the ``rabbitmq_stream`` plugin not enabled, no member of
the stream on that node) leaves the figures unknown, and says why in one log line: once, and
again only after a reading succeeded.
"""

from __future__ import annotations

import asyncio
import logging

from ...config.model import BrokerURI
from ...streams.chunk_probe import chunk_at, last_offset
from ...streams.client import StreamsClient
from ...streams.errors import StreamsError
from ...streams.wire import OFFSET
from ..link_errors import LinkError
from .endpoints import connect_streams, stream_port

__all__ = ["READ_TIMEOUT", "StreamReading", "StreamSourceLag", "source_last_offset"]

log = logging.getLogger("pumpd.lag")

READ_TIMEOUT = 10.0  # seconds a whole reading may take, connection included
CLOSE_TIMEOUT = 2.0  # seconds the held connection's polite close may take
#: seconds a subscription waits for its first chunk: the broker sends one at once when the
#: stream has it, so a longer silence is an empty stream (or nothing at that offset yet)
CHUNK_WAIT = 1.0
#: ... when the answer decides whether a destination's word is refused: a busy broker's slow
#: first chunk must not read as an empty stream there
CHECK_CHUNK_WAIT = 5.0

#: (messages behind, when the chunk of the first of them was written: wall-clock seconds,
#: None when nothing is behind or it is not known)
StreamReading = tuple[int, float | None]


class StreamSourceLag:
    """Readings of one stream on its source node (see the module docstring)."""

    def __init__(self, uri: BrokerURI, stream: str, port: int | None, *, shovel: str,
                 client_name: str) -> None:
        self.uri = uri
        self.stream = stream
        self.port = stream_port(uri, port)
        self.shovel = shovel
        self._client_name = client_name
        self._said = False  # why the figures are unknown was logged since the last success
        self._client: StreamsClient | None = None  # held between readings

    @property
    def connected(self) -> bool:
        """A connection is held between readings (:meth:`close` has one to close)."""
        return self._client is not None

    def same(self, uri: BrokerURI, stream: str, port: int | None) -> bool:
        return (uri, stream, stream_port(uri, port)) == (self.uri, self.stream, self.port)

    async def read(self, forwarded: int) -> StreamReading | None:
        """The reading after ``forwarded``, the offset of the last message forwarded (-1:
        none); None when it cannot be read (logged once)."""
        try:
            reading = await asyncio.wait_for(self._read(forwarded), READ_TIMEOUT)
        except (StreamsError, LinkError, OSError, asyncio.TimeoutError) as exc:
            why = str(exc) or f"no answer within {READ_TIMEOUT:g} s"
            if not self._said:
                self._said = True
                log.warning("shovel %s: the lag of stream %r is not known: %s (it is read over "
                            "the streams protocol at %s:%d: source_stream_port, and the "
                            "rabbitmq_stream plugin)", self.shovel, self.stream, why,
                            self.uri.effective_host, self.port)
            return None
        if self._said:
            self._said = False
            log.info("shovel %s: the lag of stream %r is read again", self.shovel, self.stream)
        return reading

    async def close(self) -> None:
        """Close the connection held between readings: politely, or at once after
        :data:`CLOSE_TIMEOUT` (a broker that does not answer must not hold up a stop)."""
        client, self._client = self._client, None
        if client is None:
            return
        try:
            await asyncio.wait_for(client.close(), CLOSE_TIMEOUT)
        except (StreamsError, OSError, asyncio.TimeoutError):
            pass  # given up: aborted below
        finally:
            if client.is_open:  # not closed politely, or the close was cancelled
                client.abort()

    async def _read(self, forwarded: int) -> StreamReading:
        client = self._client
        if client is None or not client.is_open:  # the broker or the network closed it
            self._client = None
            client = await connect_streams(self.uri, self.uri.effective_host, self.port,
                                           self._client_name, side="source")
            self._client = client
        try:
            return await self._chunks(client, forwarded)
        except BaseException:
            self._client = None
            client.abort()  # cancelled or failed mid-request: no polite close to wait for
            raise

    async def _chunks(self, client: StreamsClient, forwarded: int) -> StreamReading:
        last = await last_offset(client, self.stream, wait=CHUNK_WAIT)
        behind = 0 if last is None else max(0, last - forwarded)
        if behind == 0:
            return 0, None
        head = await chunk_at(client, self.stream, OFFSET, forwarded + 1, wait=CHUNK_WAIT)
        return behind, None if head is None else head.timestamp / 1000


async def source_last_offset(uri: BrokerURI, stream: str, port: int | None, *,
                             client_name: str) -> int | None:
    """The offset of the last message in ``stream`` on the source node (None: it holds none),
    read as the lag reads it.

    :raises LinkError: naming the source side, when it cannot be read
    """
    host, at = uri.effective_host, stream_port(uri, port)
    try:
        client = await asyncio.wait_for(
            connect_streams(uri, host, at, client_name, side="source"), READ_TIMEOUT)
        try:
            last = await asyncio.wait_for(last_offset(client, stream, wait=CHECK_CHUNK_WAIT),
                                          READ_TIMEOUT)
        except BaseException:
            client.abort()
            raise
        await client.close()
        return last
    except (StreamsError, OSError, asyncio.TimeoutError) as exc:
        why = str(exc) or f"no answer within {READ_TIMEOUT:g} s"
        raise LinkError(f"source: streams protocol {host}:{at}: {why}", side="source") from None
