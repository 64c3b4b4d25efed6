"""How :class:`pumpd.Publisher` waits for confirms: the four modes' chunking of a call
(``individual``, ``batch``, ``async``, ``none``), the waits bounded by ``confirm_timeout``, the
held writes of a blocked connection, and the :class:`PublishError` a call ends with.

:class:`ConfirmingChannel` is the publisher's base class: the API (``publisher.py``) encodes
messages into the data plane, this part writes them and waits.
"""

from __future__ import annotations

import asyncio
import bisect
import functools
from collections.abc import Callable
from typing import Literal

from ..dataplane.api import PublishPlane
from ..dataplane.frames import basic_ack_frame
from ..dataplane.properties import message_id_text
from ..engine.link import Link
from .publish_errors import PublishError, ReturnedMessage

Mode = Literal["individual", "batch", "async", "none"]
MODES: tuple[Mode, ...] = ("individual", "batch", "async", "none")

# Messages encoded per write when nothing else bounds a chunk (mode none, a large window).
CHUNK = 10_000
# Bytes waiting in the transport beyond which mode ``none`` lets the loop drain them.
HIGH_WATER = 4 << 20


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _wake_on(fut: asyncio.Future[None], _done: object) -> None:
    _wake(fut)


class ConfirmingChannel:
    """The writing and confirm-waiting half of :class:`pumpd.Publisher` (see the module
    docstring); the subclass sets these attributes before any call."""

    mode: Mode
    batch_size: int
    window: int
    confirm_timeout: float
    _loop: asyncio.AbstractEventLoop
    _link: Link
    _plane: PublishPlane
    _blocked: bool
    _waiter: tuple[asyncio.Future[None], int] | None
    _nacked: list[int]
    _returned: list[ReturnedMessage]
    # (first seq, last seq, message_id) per call that set one: a range, not an entry per
    # message, for publish_many's shared properties
    _ids: list[tuple[int, int, str]]

    def _on_data(self, data: bytes) -> bytes:
        rest: bytes = self._plane.feed(data)
        w = self._waiter
        if w is not None and self._plane.outstanding <= w[1] and not w[0].done():
            w[0].set_result(None)
        return rest

    def _on_blocked(self, blocked: bool) -> None:
        self._blocked = blocked
        if not blocked:
            self._write()

    def _write(self) -> None:
        if self._blocked:
            return  # held in the plane's buffer until connection.unblocked
        self._link.write(self._plane.take_output())
        if self.mode == "none":
            # nothing will confirm: settle what was written, so the bitmap does not grow
            seq = self._plane.next_seq - 1
            if seq >= 1 and self._plane.outstanding:
                self._plane.feed(basic_ack_frame(self._link.channel_number, seq, True))

    async def _publish_chunks(self, items: list[bytes], rk: bytes, raw: bytes) -> None:
        plane, n = self._plane, len(items)

        def encode(i: int, k: int) -> None:
            plane.publish_many(items[i : i + k] if (i or k < n) else items, rk, raw)

        await self._publish_in_chunks(n, encode)

    async def _publish_in_chunks(self, n: int, encode: Callable[[int, int], None]) -> None:
        """Publish ``n`` messages, ``encode(i, k)`` putting messages i .. i+k-1 into the data
        plane, in chunks the mode allows (one per confirm, a batch, the room left in the async
        window); nacks and returns are raised once the call is done (individual, batch)."""
        plane, i = self._plane, 0
        while i < n:
            if self.mode == "individual":
                k = 1
            elif self.mode == "batch":
                k = self.batch_size
            elif self.mode == "async":
                room = self.window - plane.outstanding
                if room <= 0:
                    await self._wait(self.window // 2)
                    continue
                k = min(room, CHUNK)
            else:
                k = CHUNK
            k = min(k, n - i)
            encode(i, k)
            i += k
            self._write()
            await self._after_write()
        if self.mode in ("individual", "batch"):
            self._raise_refused()

    async def _publish_each(self, encoded: list[tuple[bytes, bytes, bytes]]) -> None:
        plane, since_wait = self._plane, 0
        for body, rk, raw in encoded:
            if self.mode == "async" and plane.outstanding >= self.window:
                self._write()
                await self._wait(self.window // 2)
            plane.publish(body, rk, raw)
            since_wait += 1
            if self.mode == "individual" or (self.mode == "batch" and since_wait >= self.batch_size):
                since_wait = 0
                self._write()
                await self._wait(0)
            elif since_wait >= CHUNK:
                since_wait = 0
                self._write()
                await self._after_write()
        self._write()
        await self._after_write()
        if self.mode in ("individual", "batch"):
            self._raise_refused()

    async def _after_write(self) -> None:
        if self.mode in ("individual", "batch"):
            await self._wait(0)
        elif self.mode == "none" and self._link.write_buffer_size() > HIGH_WATER:
            await self._drain()
        else:
            await asyncio.sleep(0)  # one loop pass: read what confirms have arrived

    async def _drain(self) -> None:
        while self._link.write_buffer_size() > 0 and self._link.is_open:
            await asyncio.sleep(0.001)
        if not self._link.is_open:
            raise self._error("the connection was lost")

    async def _flush(self) -> None:
        self._write()
        if self.mode == "none":
            await self._drain()
        else:
            await self._wait(0)
        self._raise_refused()
        self._ids.clear()

    async def _wait(self, target: int) -> None:
        """Until at most ``target`` messages are unconfirmed."""
        plane = self._plane
        while plane.outstanding > target:
            if not self._link.is_open:
                raise self._error(f"the connection was lost ({self._link.closed.result()})")
            # One future, woken by the interceptor (enough confirms), the link closing or the
            # timer: cheaper than asyncio.wait, and individual mode waits once per message.
            fut: asyncio.Future[None] = self._loop.create_future()
            self._waiter = (fut, target)
            before = plane.outstanding
            timer = self._loop.call_later(self.confirm_timeout, _wake, fut)
            self._link.closed.add_done_callback(fut_waker := functools.partial(_wake_on, fut))
            try:
                await fut
            finally:
                self._waiter = None
                timer.cancel()
                self._link.closed.remove_done_callback(fut_waker)
            if plane.outstanding > target and plane.outstanding >= before and self._link.is_open:
                blocked = (" while the broker had blocked the connection (connection.blocked: "
                           "a resource alarm)") if self._blocked else ""
                raise self._error(f"no confirm for {self.confirm_timeout:g} s{blocked}")

    def _raise_refused(self) -> None:
        self._collect()
        if self._nacked or self._returned:
            raise self._error("the broker refused messages")

    def _collect(self) -> None:
        self._nacked.extend(self._plane.take_nacked())
        for seq, code, text, exchange, rk, raw in self._plane.take_returns():
            self._returned.append(ReturnedMessage(
                seq, code, text.decode(errors="replace"), exchange.decode(errors="replace"),
                rk.decode(errors="replace"), message_id_text(raw)))

    def _error(self, reason: str) -> PublishError:
        self._collect()
        nacked, returned = self._nacked, self._returned
        self._nacked, self._returned = [], []
        unconfirmed = [int(s) for s in self._plane.unconfirmed()]
        return PublishError(reason, nacked, returned, unconfirmed,
                            self._message_ids([*nacked, *unconfirmed]),
                            self._plane.confirmed, self._plane.next_seq - 1)

    def _message_ids(self, seqs: list[int]) -> dict[int, str]:
        out: dict[int, str] = {}
        if not self._ids:
            return out
        firsts = [first for first, _, _ in self._ids]
        for s in seqs:
            k = bisect.bisect_right(firsts, s) - 1
            if k >= 0 and self._ids[k][0] <= s <= self._ids[k][1]:
                out[s] = self._ids[k][2]
        return out
