"""Where a shovel reading a stream is: the offset of the last message the destination confirmed,
kept on the source broker, so that a reconnect, a restart or another daemon taking the shovel
over resumes right after it.

The store is a last-value record in AMQP 0-9-1 terms, on the source broker and vhost: the
durable classic queue ``pumpd.stream-position.<shovel>`` with ``x-max-length: 1`` (a new record
pushes the old one out), holding one persistent message ``{"stream": ..., "offset": N}``.
Why not the streams protocol's stored offsets: the engine speaks AMQP 0-9-1 only (pika), and
the streams plugin's port may not be reachable where AMQP is; a queue needs nothing more.
Read at session start (a ``basic.get`` whose message is requeued); written at most once a second
and when the session closes.

Which offset: the relay keeps the last message it published (``keep_last``); when nothing is
in flight or buffered, that message is the last one the destination confirmed, and its
``x-stream-offset`` header is exact. So the record moves whenever the shovel catches its
breath (in practice often: every confirm round trip that drains the window) and never points
past an unconfirmed message; a crash loses at most the progress since the last record, which
is forwarded again (at-least-once, as the shovel always is). Offsets are read from the
deliveries, never counted: a stream's offsets have gaps where segments begin.

A shovel counts as reading a stream when its consumer arguments have ``x-stream-offset`` or its
source declarations declare its queue with ``x-queue-type: stream``; that ``x-stream-offset``
then applies only to the very first start, before any record exists.
"""

from __future__ import annotations

import asyncio
import json
import logging
import struct
import time
from collections.abc import Mapping
from typing import Any

from ..config.model import BrokerURI, Declaration
from ..dataplane.properties import HEADERS_INDEX, FrameError, split_properties, table_entries
from .link import Link, LinkError, open_link
from .parameters import to_pika_parameters
from .queue_names import stream_position_queue

log = logging.getLogger("pumpd.stream_position")

SAVE_EVERY = 1.0  # seconds between records at most
_OFFSET_KEY = b"x-stream-offset"


def stream_offset(raw_properties: bytes) -> int | None:
    """The ``x-stream-offset`` header of a delivery's property list, or None."""
    try:
        table = split_properties(raw_properties)[HEADERS_INDEX]
        if table is None:
            return None
        for key, _start, vpos, _end in table_entries(table):
            if key == _OFFSET_KEY:
                kind = table[vpos]
                if kind == ord("l"):
                    return int(struct.unpack_from(">q", table, vpos + 1)[0])
                if kind == ord("I"):
                    return int(struct.unpack_from(">i", table, vpos + 1)[0])
                return None
    except (FrameError, ValueError, struct.error):
        return None
    return None


class StreamPosition:
    """The record for one shovel and stream (see the module docstring)."""

    def __init__(self, uri: BrokerURI, shovel: str, stream: str, *, client_name: str) -> None:
        self.uri = uri
        self.shovel = shovel
        self.stream = stream
        self.queue = stream_position_queue(shovel)
        self._client_name = client_name
        self._link: Link | None = None
        self.saved: int | None = None  # the offset in the record
        self._last_save = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._saving: asyncio.Task[None] | None = None

    async def _open(self) -> Link:
        if self._link is not None and self._link.is_open:
            return self._link
        link = await open_link(self.uri, to_pika_parameters(self.uri, client_name=self._client_name))
        try:
            await link.declare([Declaration("queue.declare", {
                "queue": self.queue, "durable": True,
                "arguments": {"x-max-length": 1, "x-queue-type": "classic"}}, if_missing=True)])
        except BaseException:
            link.abort()
            raise
        self._link = link
        return link

    async def load(self) -> int | None:
        """The recorded offset for this stream, or None (no record, or one for another stream).

        :raises LinkError: when the source broker cannot be asked
        """
        link = await self._open()
        if await link.queue_length(self.queue) == 0:
            return None
        loop = asyncio.get_running_loop()
        got: asyncio.Future[tuple[int, bytes]] = loop.create_future()
        link.channel.basic_get(self.queue, lambda _c, m, _p, b: got.set_result(
            (m.delivery_tag, b)), auto_ack=False)
        waiting: set[asyncio.Future[Any]] = {got, link.closed}
        done, _ = await asyncio.wait(waiting, timeout=30,
                                     return_when=asyncio.FIRST_COMPLETED)
        if got not in done:
            raise LinkError(f"reading the stream position in queue {self.queue!r} failed")
        tag, body = got.result()
        link.channel.basic_reject(tag, requeue=True)
        try:
            record = json.loads(body)
            offset = int(record["offset"])
        except (ValueError, KeyError, TypeError):
            log.warning("shovel %s: the record in queue %r is not a stream position; ignored",
                        self.shovel, self.queue)
            return None
        if record.get("stream") != self.stream:
            log.warning("shovel %s: the stream position in %r is for stream %r, not %r; ignored",
                        self.shovel, self.queue, record.get("stream"), self.stream)
            return None
        self.saved = offset
        return offset

    def consumer_arguments(self, configured: Mapping[str, Any]) -> dict[str, Any]:
        """basic.consume's arguments: after the record when there is one."""
        if self.saved is None:
            return dict(configured)
        return {**configured, "x-stream-offset": self.saved + 1}

    def confirmed_offset(self, relay: Any) -> int | None:
        """The offset of the last message the destination confirmed, when that is certain."""
        last = relay.last_message
        if last is None or relay.in_flight or relay.buffered:
            return None
        return stream_offset(last.properties)

    def offer(self, relay: Any) -> None:
        """After a flush: record the confirmed offset when it moved (at most every
        :data:`SAVE_EVERY`; a later call covers what a skipped one would have). Called after
        every flush, so the clock is asked before the last message's headers are read."""
        if self._timer is not None:
            return  # a record is due already: it reads the offset then
        now = time.monotonic()
        wait = self._last_save + SAVE_EVERY - now
        if wait > 0:
            self._timer = asyncio.get_running_loop().call_later(wait, self._due, relay)
            return
        offset = self.confirmed_offset(relay)
        if offset is None or (self.saved is not None and offset <= self.saved):
            return
        loop = asyncio.get_running_loop()
        self._last_save = now
        self.saved = offset
        self._saving = loop.create_task(self._save(offset))

    def _due(self, relay: Any) -> None:
        self._timer = None
        self.offer(relay)

    async def _save(self, offset: int) -> None:
        try:
            link = await self._open()
            body = json.dumps({"stream": self.stream, "offset": offset}).encode()
            import pika  # the engine's only client; properties for the record

            link.channel.basic_publish("", self.queue, body,
                                       pika.BasicProperties(delivery_mode=2))
        except LinkError as exc:  # the next record, or the next session, tries again
            log.warning("shovel %s: recording stream position %d failed: %s", self.shovel,
                        offset, exc)

    async def close(self, relay: Any) -> None:
        """Record the last confirmed offset (when certain) and close the connection."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if relay is not None:
            offset = self.confirmed_offset(relay)
            if offset is not None and (self.saved is None or offset > self.saved):
                self.saved = offset
                await self._save(offset)
        if self._link is not None:
            await self._link.close_quietly()
            self._link = None
