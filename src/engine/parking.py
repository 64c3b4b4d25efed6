"""Where an undeliverable message goes: the park queue on the source broker, or the source
queue's dead-letter exchange (``basic.reject`` without requeue).

A parked message is published unchanged (body, properties and every header as received) with a
few headers added that say why and where it came from (and a ``user_id`` that the source broker
would refuse from pumpd's user moved into a header); when its properties cannot be parsed
even that far, it is parked exactly as received and only the log says why. The park publish uses
a connection of its own to the source broker, in confirm mode with ``mandatory`` set: the message
is acked at the source only once the park queue has it.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from typing import Any

from ..config.model import BrokerURI
from ..dataplane.frames import (
    FRAME_BODY,
    FRAME_HEADER,
    FRAME_METHOD,
    FRAME_OVERHEAD,
    basic_publish_payload,
    content_header_payload,
    frame,
)
from ..dataplane.properties import (
    HEADERS_INDEX,
    USER_ID_INDEX,
    FrameError,
    append_to_table,
    join_properties,
    message_id_text,
    shortstr_value,
    split_properties,
)
from .link import Link, LinkError, open_link
from .parameters import to_pika_parameters

log = logging.getLogger("pumpd.parking")

PARK_CONFIRM_TIMEOUT = 30.0  # seconds; a park that takes longer fails the session (nothing lost)


def message_id(raw_properties: bytes) -> str | None:
    """The message_id property, if the property list can be read that far."""
    return message_id_text(raw_properties)


def with_park_headers(raw_properties: bytes, entries: dict[str, str],
                      username: str | None = None) -> bytes | None:
    """The property list with ``entries`` appended to its headers table (long strings), every
    existing byte kept; None when the list cannot be parsed that far.

    A ``user_id`` other than ``username`` (the park connection's user) would make the broker
    refuse the publish (406, as it refused the message at the destination): it moves to the
    header ``x-pumpd-original-user-id`` instead.
    """
    try:
        values = split_properties(raw_properties)
    except (FrameError, struct.error):
        return None
    user_id = values[USER_ID_INDEX]
    user = None if user_id is None else shortstr_value(user_id)
    if username is not None and user is not None and user != username.encode():
        entries = {**entries, "x-pumpd-original-user-id": user.decode("utf-8", "replace")}
        values[USER_ID_INDEX] = None
    values[HEADERS_INDEX] = append_to_table(values[HEADERS_INDEX], entries)
    return join_properties(values)


class Parker:
    """Publishes undeliverable messages to ``queue`` on the source broker, one at a time, each
    confirmed before :meth:`park` returns. The connection opens at the first park."""

    def __init__(self, uri: BrokerURI, queue: str, *, client_name: str) -> None:
        self.uri = uri
        self.queue = queue
        self._client_name = client_name
        self._link: Link | None = None
        self._seq = 0
        self._confirms: dict[int, asyncio.Future[bool]] = {}
        self._returned = False

    async def _open(self) -> Link:
        if self._link is not None and self._link.is_open:
            return self._link
        link = await open_link(self.uri, to_pika_parameters(self.uri, client_name=self._client_name))
        try:
            await link.declare_park_queue(self.queue)
            await link.confirm_select(self._on_confirm)
            link.channel.add_on_return_callback(self._on_return)
        except BaseException:
            link.abort()
            raise
        self._link, self._seq, self._confirms = link, 0, {}
        return link

    def _on_return(self, *_: Any) -> None:
        self._returned = True

    def _on_confirm(self, method_frame: Any) -> None:
        method = method_frame.method
        ok = method.NAME == "Basic.Ack" and not self._returned
        self._returned = False
        tag = int(method.delivery_tag)
        for seq in [s for s in self._confirms if s == tag or (method.multiple and s <= tag)]:
            fut = self._confirms.pop(seq)
            if not fut.done():
                fut.set_result(ok)

    async def park(self, routing: tuple[bytes, bytes], raw_properties: bytes, body: bytes,
                   why: dict[str, str]) -> None:
        """Publish the message to the park queue and wait for its confirm.

        :raises LinkError: when the park queue cannot take it (the caller leaves the message
            unacknowledged, so the source keeps it)
        """
        link = await self._open()
        props = with_park_headers(raw_properties, why, self.uri.username)
        if props is None or 12 + len(props) + FRAME_OVERHEAD > link.frame_max:
            props = raw_properties  # unparseable or too large to add to: parked as received
        ch = link.channel_number
        body_max = link.frame_max - FRAME_OVERHEAD
        frames = [frame(FRAME_METHOD, ch, basic_publish_payload(b"", self.queue.encode(), True)),
                  frame(FRAME_HEADER, ch, content_header_payload(len(body), props))]
        frames += [frame(FRAME_BODY, ch, body[i:i + body_max])
                   for i in range(0, len(body), body_max)]
        self._seq += 1
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._confirms[self._seq] = fut
        link.write(b"".join(frames))
        waiting: set[asyncio.Future[Any]] = {fut, link.closed}
        done, _ = await asyncio.wait(waiting, timeout=PARK_CONFIRM_TIMEOUT,
                                     return_when=asyncio.FIRST_COMPLETED)
        if fut not in done:
            why_not = (f"connection lost: {link.closed.result()}" if link.closed.done()
                       else f"no confirm within {PARK_CONFIRM_TIMEOUT:.0f}s")
            raise LinkError(f"parking in queue {self.queue!r} on {self.uri.redacted()} failed: "
                            f"{why_not}")
        if not fut.result():
            raise LinkError(f"parking in queue {self.queue!r} on {self.uri.redacted()} failed: "
                            "the broker refused or could not route the message")

    async def close(self) -> None:
        if self._link is not None:
            await self._link.close_quietly()
            self._link = None
