"""The undeliverable policy of one session: what happens to a message that cannot be delivered.

A message the path cannot forward (too large for the destination's frame_max, malformed), one
the destination returns (``mandatory`` and no route) and one the destination refuses by closing
(found by a *careful* session, which forwards one message at a time) is settled at the source by
the shovel's policy: parked (``parking.py``), rejected to the source queue's dead-letter exchange,
or the shovel stops and names it. While one is settled, the side it came from is not read. The
session forwards; it calls :meth:`Undeliverable.source_paused` / ``destination_paused`` when the
path paused a side, and :meth:`Undeliverable.settle_refused` when the destination closed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from ..config.model import AckMode, BrokerURI, Disposition, ShovelConfig
from .ending import SessionEnded
from .endpoint import REJECTED, Destination, Endpoint, Path, Settlement, Source
from .link_errors import LinkError
from .parking import Parker, message_id

log = logging.getLogger("pumpd.session")  # the session's logger: its lines read as before


class Forwarding(Protocol):
    """What the policy sees of the session it settles messages for."""

    source: Source | None
    destination: Destination | None
    path: Path | None

    def flush(self, *, acks_due: bool = False) -> None: ...

    def end(self, ended: SessionEnded) -> None: ...


def undeliverable_kind(reason: str) -> str:
    """The counter suffix for a reason the path gives: a destination's refusal (a nack, or
    AMQP 1.0's ``rejected``) is ``refused``, as a refusal that closed the channel is."""
    if reason.startswith(REJECTED):
        return "refused"
    return "too_large" if "frame_max" in reason else "malformed"


class Undeliverable:
    """The policy of one session (see the module docstring).

    :param careful: messages this session forwards one at a time, after the last one ended on a
        message the destination refused (0 when not careful, and always with another ack mode)
    """

    def __init__(self, cfg: ShovelConfig, session: Forwarding, *, careful: int = 0) -> None:
        self.cfg = cfg
        self._session = session
        # careful > 0: the last session ended on a message the destination refused. This one
        # forwards one message at a time (prefetch 1, the path keeping a copy of it) until
        # ``careful`` messages are settled, so that a refusal names its message for certain.
        self.careful = careful if cfg.ack_mode == AckMode.ON_CONFIRM else 0
        self.careful_left = 0  # after a refusal handled here: for the next session
        self._parker: Parker | None = None
        # The task settling a paused side, by why it paused ("undeliverable" on the source,
        # "returned" on the destination): at most one each.
        self._settling: dict[str, asyncio.Task[None]] = {}
        self._terminal: str | None = None
        # handled undeliverable messages, by Counters field
        self.counts: dict[str, int] = {}

    @property
    def holds_returns(self) -> bool:
        """Whether returned messages go to the unroutable policy (else they are only counted)."""
        return (self.cfg.publish_mandatory
                and self.cfg.undeliverable.unroutable != Disposition.DROP)

    def open_parker(self, source_uri: BrokerURI, client_name: str) -> None:
        """Where parked messages will go (connected at the first park)."""
        self._parker = Parker(source_uri, self.cfg.undeliverable.park_queue,
                              client_name=client_name)

    async def close(self) -> None:
        for task in list(self._settling.values()):
            task.cancel()
        if self._parker is not None:
            await self._parker.close()

    # -- a side the path paused on a message ---------------------------------------------------

    def source_paused(self) -> None:
        """The path paused the source on a message it cannot forward: settle it."""
        self._start_settling("undeliverable", self._session.source, self._settle_undeliverable)

    def destination_paused(self) -> None:
        """The path paused the destination on a returned message: settle it."""
        self._start_settling("returned", self._session.destination, self._settle_returned)

    def _start_settling(self, why: str, link: Endpoint | None,
                        settle_all: Callable[[], Awaitable[bool]]) -> None:
        if why in self._settling:
            return
        assert link is not None
        link.pause_reading(True, why)
        self._settling[why] = asyncio.get_running_loop().create_task(
            self._settle(why, link, settle_all))

    async def _settle(self, why: str, link: Endpoint,
                      settle_all: Callable[[], Awaitable[bool]]) -> None:
        """Settle every message the side is paused on (``settle_all``); read it again unless
        that stopped the shovel with the message unread."""
        task = asyncio.current_task()
        try:
            if await settle_all():
                # Done before the flush: a path that finds the next message unforwardable
                # while forwarding in that flush (the generic path does) pauses again, and
                # that pause must start a settling of its own.
                if self._settling.get(why) is task:
                    del self._settling[why]
                link.pause_reading(False, why)
                self._session.flush()
        except LinkError as exc:
            self._session.end(SessionEnded(f"source: {exc}", side="source"))
        finally:
            if self._settling.get(why) is task:
                del self._settling[why]

    async def _settle_undeliverable(self) -> bool:
        path = self._session.path
        assert path is not None
        while path.paused:
            item = path.take_undeliverable()
            if item is None:
                break
            tag, _redelivered, exchange, routing_key, props, body, reason = item
            self._session.flush(acks_due=True)  # what came before it goes first
            await self._dispose(f"undeliverable_{undeliverable_kind(reason)}", tag,
                                (exchange, routing_key), props, body, reason)
            if self._terminal is not None:
                # Everything after it stays unacknowledged and is requeued at close; the
                # path goes on reading, so that the client sees the cancel-ok and close-ok.
                path.hold_rest()
            path.resume()
        return True

    async def _settle_returned(self) -> bool:
        path = self._session.path
        assert path is not None
        while path.destination_paused:
            returned = path.take_returned()
            if returned is None:
                break
            code, text, exchange, routing_key, props, body = returned
            cause = (f"unroutable: the destination returned it ({code} {text}; exchange "
                     f"{exchange.decode('utf-8', 'replace')!r}, routing key "
                     f"{routing_key.decode('utf-8', 'replace')!r})")
            self._count("undeliverable_unroutable")
            mid = message_id(props)
            what = "a returned message" + (f" (message_id {mid!r})" if mid else "")
            if self.cfg.undeliverable.unroutable == Disposition.STOP:
                # Its confirm, and the source ack it would allow, stay unread: the source
                # keeps it (and requeues the messages in flight after it) when we close.
                self._stop_on(what, cause)
                return False
            # Parked before its confirm is read, so its source ack waits for the park.
            await self._park(what, (exchange, routing_key), props, body, cause)
            path.resume_destination()
        return True

    # -- one message ----------------------------------------------------------------------------

    async def _dispose(self, counter: str, tag: int, routing: tuple[bytes, bytes], props: bytes,
                       body: bytes, cause: str) -> None:
        """Apply the undeliverable policy to one message the source delivered as ``tag``.

        :raises LinkError: when parking fails (the message stays unacknowledged at the source)
        """
        source = self._session.source
        assert source is not None
        policy = self.cfg.undeliverable.policy
        mid = message_id(props)
        what = f"delivery tag {tag}" + (f", message_id {mid!r}" if mid else "")
        self._count(counter)
        if policy == Disposition.STOP:
            self._stop_on(what, cause)
            return
        if policy == Disposition.DEAD_LETTER:
            source.settle(tag, tag, Settlement.REJECT)
            self._count("dead_lettered")
            log.warning("shovel %s: undeliverable message (%s): %s; rejected to the source "
                        "queue's dead-letter exchange", self.cfg.name, what, cause)
            return
        await self._park(what, routing, props, body, cause)
        source.settle(tag, tag, Settlement.ACCEPT)

    def _stop_on(self, what: str, cause: str) -> None:
        """The stop policy: the session ends and the shovel terminates, naming the message."""
        self._terminal = f"undeliverable message ({what}): {cause}; policy stop"
        log.error("shovel %s: %s", self.cfg.name, self._terminal)
        self._session.end(SessionEnded(self._terminal, terminal=True))

    async def _park(self, what: str, routing: tuple[bytes, bytes], props: bytes, body: bytes,
                    cause: str) -> None:
        """The park policy, up to the park queue's confirm (the caller settles the source).

        :raises LinkError: when the park queue cannot take it
        """
        assert self._parker is not None
        await self._parker.park(routing, props, body, {
            "x-pumpd-undeliverable": cause,
            "x-pumpd-shovel": self.cfg.name,
            "x-pumpd-original-exchange": routing[0].decode("utf-8", "replace"),
            "x-pumpd-original-routing-key": routing[1].decode("utf-8", "replace"),
        })
        self._count("parked")
        log.warning("shovel %s: undeliverable message (%s): %s; parked in queue %r",
                    self.cfg.name, what, cause, self.cfg.undeliverable.park_queue)

    def _count(self, counter: str) -> None:
        self.counts[counter] = self.counts.get(counter, 0) + 1

    async def settle_refused(self, ended: SessionEnded) -> SessionEnded:
        """After the destination closed on a message in a careful session: that message (the
        only one in flight) is the one it refuses; apply the policy to it at the source, which
        is still connected. Returns how the session ended, marked handled when it was."""
        path, source = self._session.path, self._session.source
        if not (self.careful and ended.refused_message and path is not None
                and source is not None and source.is_open and path.in_flight == 1):
            return ended
        last = path.last_message
        if last is None:
            return ended
        tag, _redelivered, exchange, routing_key, props, body, _ = last
        cause = f"refused by the destination: {ended}"
        try:
            await self._dispose("undeliverable_refused", tag, (exchange, routing_key), props,
                                body, cause)
        except LinkError as exc:
            return SessionEnded(f"{ended}; parking the refused message failed: {exc}",
                                side="source")
        if self._terminal is not None:
            return SessionEnded(self._terminal, terminal=True)
        self.careful_left = max(self.careful - path.acked - 1, 0)
        return SessionEnded(str(ended), side=ended.side, reply_code=ended.reply_code,
                            handled=True)
