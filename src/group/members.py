"""A group of pumpd daemons finding each other through a coordination broker: who is in the
group, what each one says of itself, and which shovels the group has paused.

No service beyond the broker, no clock shared between machines. Everything is a queue on the
coordination broker (one vhost), named after the group (``cluster``):

- **Membership**, ``pumpd.member.<cluster>.<k>``: a member holds the exclusive queue of one
  slot ``k`` (0 to 63), the lowest it could claim (a declare answered 405 RESOURCE_LOCKED is
  another member's: it tries the next). The broker grants an exclusive queue to one connection
  and deletes it the moment that connection ends, so a member whose process dies (its socket
  closes) leaves the group at once, and one frozen or cut off leaves when the broker's
  heartbeat gives up on its connection (the daemon asks for half its shovels' source
  heartbeat there: :func:`pumpd.config.cluster.coordination_heartbeat`). Members see each
  other by passive declares of the slots' names: 405 is a live member, 404 a free slot (both
  close the channel: they run on the spare channels of :mod:`pumpd.group.probes`). Every
  ``poll_interval`` seconds a member probes the slots up to the highest live one plus
  :data:`SPARE_SLOTS` (a newcomer claims the lowest free slot, so it shows up there), and all
  64 every :data:`FULL_SCAN_EVERY` polls.
- **What a member says of itself**, ``pumpd.member-info.<cluster>.<k>``: a last-value record
  (:class:`MemberInfo` as JSON): a durable classic queue with ``x-max-length: 1``, so a new
  record pushes the old one out, read by the others with ``basic.get`` and put back with
  ``basic.reject`` (requeue). Why a queue: the broker holds it without a plugin, and a reader
  leaves it in place. Its limits: a reader holding the record for its round trip hides it
  from another reader at that instant (who keeps what it read before); the record of a slot
  is read again every ``info_interval`` seconds, so when a member dies and another claims its
  slot within one poll, the others may show the old member's record for up to that long. The
  record is written when the member joins, when what it says changed (at the next poll), and
  every :data:`REFRESH_EVERY` seconds.
- **Paused shovels**, ``pumpd.paused.<cluster>.<shovel>``: a durable queue is the marker;
  :meth:`Group.pause` declares it, :meth:`Group.resume` deletes it, :meth:`Group.paused` tells
  which of the given shovels have one (passive declares: there or 404).

Queue names longer than AMQP's 255 bytes keep their head and end in a hash
(:mod:`pumpd.engine.queue_names`). A cluster name follows the one rule of
:func:`pumpd.config.cluster.check_cluster_name` (no dots: the names stay unambiguous).

Measured with ``python bench/group.py membership --reps 10`` (a private node, two observing
members polling every second, a third killed with ``kill -9``): gone from both observers' views
a median 0.78 s after the kill (1.02 s at worst); a new member in both views 1.0 to 2.0 s after
its process started; two idle members cost 0.7 % of a core, the broker 1.6 %.

The view (:class:`GroupView`) changes on every change seen: a member joins, leaves, or says
something new of itself. The coordinator reads :attr:`Group.view`, iterates over
:meth:`Group.changes` or registers :meth:`Group.on_change`. When the coordination broker cannot
be reached the view is empty and not ``joined``; the group reconnects by itself (the next
broker of the list at once, then with a growing delay up to ``reconnect_max``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..config.cluster import check_cluster_name
from ..config.model import BrokerURI
from ..engine.link import Link, LinkError, open_link
from ..engine.parameters import to_pika_parameters
from ..engine.queue_names import info_queue, member_queue, paused_queue
from .probes import Probes, QueueState
from .spread import PositionKey
from .view import GroupView, Member, MemberInfo

__all__ = ["FULL_SCAN_EVERY", "MAX_MEMBERS", "REFRESH_EVERY", "SPARE_SLOTS", "Group"]

log = logging.getLogger("pumpd.group")

MAX_MEMBERS = 64  # slots 0..63
SPARE_SLOTS = 4  # free slots probed above the highest live one at every poll
FULL_SCAN_EVERY = 10  # polls between probes of every slot
REFRESH_EVERY = 30.0  # seconds between rewrites of an unchanged member record

_INFO_ARGUMENTS = {"x-max-length": 1, "x-overflow": "drop-head", "x-queue-type": "classic"}


@dataclass
class _Seen:
    """What this member knows of another live slot."""

    info: MemberInfo | None = None
    read_at: float | None = None  # monotonic time of the last read that found a record


@dataclass
class _Connected:
    link: Link
    probes: Probes
    slot: int | None = None
    polls: int = 0
    published: bytes | None = None  # the record last written
    published_at: float = 0.0
    others: dict[int, _Seen] = field(default_factory=dict)


class Group:
    """This daemon's membership of the group ``cluster`` (see the module docstring).

    :param brokers: the coordination broker's URIs (nodes of one RabbitMQ cluster, or one
        broker): tried in order, the next at once after a failure
    :param me: what this member says of itself (its ``positions`` change with
        :meth:`set_positions`)
    :param poll_interval: seconds between polls of the slots
    :param info_interval: seconds between reads of another member's record
    :param max_members: slots, at most :data:`MAX_MEMBERS`
    :param timeout: seconds any one broker request may take
    :param heartbeat: the heartbeat (seconds) the connection asks for when the broker's URI
        gives none (None: the broker's proposal); :attr:`heartbeat` may be changed later, and
        applies from the next connection
    :raises ValueError: a bad cluster name, an empty broker list, a bad interval
    """

    def __init__(self, brokers: Sequence[BrokerURI], cluster: str, me: MemberInfo, *,
                 poll_interval: float = 1.0, info_interval: float = 3.0,
                 max_members: int = MAX_MEMBERS, reconnect_max: float = 8.0,
                 timeout: float = 10.0, heartbeat: int | None = None) -> None:
        if not brokers:
            raise ValueError("a group needs at least one coordination broker")
        if poll_interval <= 0 or info_interval <= 0 or reconnect_max <= 0 or timeout <= 0:
            raise ValueError("intervals and timeouts are positive")
        if not 1 <= max_members <= MAX_MEMBERS:
            raise ValueError(f"max_members is 1 to {MAX_MEMBERS}")
        self.brokers = tuple(brokers)
        why = check_cluster_name(cluster)
        if why is not None:
            raise ValueError(f"cluster name: {why}")
        self.cluster = cluster
        self.poll_interval = poll_interval
        self.info_interval = info_interval
        self.max_members = max_members
        self.reconnect_max = reconnect_max
        self.timeout = timeout
        self.heartbeat = heartbeat
        self._me = me
        self._conn: _Connected | None = None
        self._view = GroupView(cluster, me.id)
        self._callbacks: list[Callable[[GroupView], None]] = []
        self._version = 0
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._warned_duplicates: frozenset[str] = frozenset()
        self.last_error: str | None = None  # why the group is not connected, when it is not

    # -- the view ----------------------------------------------------------------------------

    @property
    def view(self) -> GroupView:
        return self._view

    @property
    def me(self) -> MemberInfo:
        return self._me

    def on_change(self, callback: Callable[[GroupView], None]) -> None:
        """Call ``callback(view)`` on every change of the view (from the group's task; an
        exception it raises is logged and does not stop the group)."""
        self._callbacks.append(callback)

    async def changes(self) -> AsyncIterator[GroupView]:
        """The view now, then each new view (a slow reader skips to the latest)."""
        seen = -1
        while True:
            if self._version != seen:
                seen = self._version
                yield self._view
                continue
            await self._changed.wait()

    async def wait_joined(self, timeout: float) -> GroupView:
        """The first view in which this member holds a slot.

        :raises TimeoutError: when it did not join within ``timeout`` seconds
        """
        async def joined() -> GroupView:
            async for view in self.changes():
                if view.joined:
                    return view
            raise AssertionError("unreachable")

        return await asyncio.wait_for(joined(), timeout)

    def set_positions(self, positions: Iterable[PositionKey]) -> None:
        """The positions this member runs now, in the order it took them (oldest first: the
        sticky spread keeps those): in its record from the next poll on."""
        self._me = replace(self._me, positions=tuple(dict.fromkeys(positions)))

    def set_definitions(self, digest: str) -> None:
        """The hash of the definitions this member runs now: in its record from the next poll."""
        self._me = replace(self._me, definitions=digest)

    def _publish_view(self) -> None:
        conn = self._conn
        if conn is None:
            view = GroupView(self.cluster, self._me.id)
        else:
            members = [Member(k, seen.info) for k, seen in conn.others.items()]
            if conn.slot is not None:
                members.append(Member(conn.slot, self._me))
            view = GroupView(self.cluster, self._me.id, conn.slot,
                             tuple(sorted(members, key=lambda m: m.slot)))
        if view == self._view:
            return
        self._view = view
        self._version += 1
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        duplicates = view.duplicate_ids()
        if duplicates - self._warned_duplicates:
            log.warning("group %s: more than one member has the id %s (each member needs an "
                        "id of its own; the spread counts it once)", self.cluster,
                        ", ".join(sorted(duplicates)))
        self._warned_duplicates = duplicates
        for callback in list(self._callbacks):
            try:
                callback(view)
            except Exception:
                log.exception("group %s: a view callback failed", self.cluster)

    # -- running -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start joining and polling in a task of the running loop (returns at once; see
        :meth:`wait_joined`)."""
        if self._task is None:
            self._closing = False
            self._task = asyncio.get_running_loop().create_task(self._run(),
                                                                name=f"group {self.cluster}")

    async def close(self) -> None:
        """Leave the group: the connection closes, and with it this member's slot."""
        self._closing = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        await self._disconnect()
        self._publish_view()

    async def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.link.close_quietly()

    async def _run(self) -> None:
        failures = 0
        index = 0
        while not self._closing:
            uri = self.brokers[index % len(self.brokers)]
            try:
                await self._connect(uri)
                failures = 0
                self.last_error = None
                await self._serve()
            except LinkError as exc:
                self.last_error = str(exc)
                log.warning("group %s: coordination broker %s: %s", self.cluster,
                            uri.redacted(), exc)
            except Exception as exc:  # a bug or a URI that cannot connect: said, then retried
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("group %s: coordination broker %s", self.cluster, uri.redacted())
            await self._disconnect()
            self._publish_view()
            failures += 1
            index += 1
            # every broker of the list once at once; then back off, doubling
            if failures >= len(self.brokers):
                rounds = failures // len(self.brokers)
                await asyncio.sleep(min(self.reconnect_max, float(2 ** (rounds - 1))))

    async def _connect(self, uri: BrokerURI) -> None:
        name = f"pumpd group {self.cluster} member {self._me.id}"
        heartbeat = self.heartbeat
        if uri.heartbeat is None and heartbeat is not None:
            uri = replace(uri, heartbeat=heartbeat)
        link = await open_link(uri, to_pika_parameters(uri, client_name=name))
        self._conn = _Connected(link, Probes(link, timeout=self.timeout))

    async def _serve(self) -> None:
        conn = self._conn
        assert conn is not None
        while True:
            await self._poll(conn)
            if conn.slot is None:
                conn.slot = await self._claim(conn)
                if conn.slot is not None:
                    log.info("group %s: member %s holds slot %d", self.cluster,
                             self._me.id, conn.slot)
                    await conn.probes.declare(info_queue(self.cluster, conn.slot),
                                              arguments=_INFO_ARGUMENTS)
            if conn.slot is not None:
                self._write_record(conn)
            self._publish_view()
            await asyncio.wait({conn.link.closed}, timeout=self.poll_interval)
            if conn.link.closed.done():
                raise LinkError(str(conn.link.closed.result()))

    def _scan_limit(self, conn: _Connected) -> int:
        if conn.polls % FULL_SCAN_EVERY == 0:
            return self.max_members
        highest = max([*conn.others, -1 if conn.slot is None else conn.slot])
        return min(self.max_members, highest + 1 + SPARE_SLOTS)

    async def _poll(self, conn: _Connected) -> None:
        """Probe the slots, read the records that are due, forget the slots gone free."""
        slots = list(range(self._scan_limit(conn)))
        if conn.slot is not None and conn.slot not in slots:
            slots.append(conn.slot)
        conn.polls += 1
        states = await _all(conn.probes.state(member_queue(self.cluster, k)) for k in slots)
        for k, state in zip(slots, states, strict=True):
            if k == conn.slot:
                if state is not QueueState.THERE:
                    # deleted from under this connection (an operator, the management UI):
                    # not this member's any more; it claims one again
                    log.warning("group %s: member %s lost slot %d (its queue is %s)",
                                self.cluster, self._me.id, k, state.value)
                    conn.slot = None
                    conn.published = None
                    if state is QueueState.HELD:
                        conn.others.setdefault(k, _Seen())
                continue
            if state is QueueState.HELD:
                conn.others.setdefault(k, _Seen())
            else:  # free; or a shared queue in a slot's name, which no member holds
                conn.others.pop(k, None)
        now = time.monotonic()
        due = [k for k, seen in conn.others.items()
               if seen.read_at is None or now - seen.read_at >= self.info_interval]
        bodies = await _all(conn.probes.read_last(info_queue(self.cluster, k)) for k in due)
        for k, body in zip(due, bodies, strict=True):
            seen = conn.others.get(k)
            if seen is None or body is None:
                # not written yet, or another reader holds it for a moment: what was read
                # before stands, and it is read again at the next poll
                continue
            try:
                seen.info = MemberInfo.from_json(body)
            except ValueError as exc:
                log.warning("group %s: the record of slot %d is not a member record: %s",
                            self.cluster, k, exc)
                seen.info = None
            seen.read_at = now

    async def _claim(self, conn: _Connected) -> int | None:
        """Claim the lowest free slot (None: every slot is held)."""
        for k in range(self.max_members):
            if k in conn.others:
                continue
            if await conn.probes.claim(member_queue(self.cluster, k)):
                conn.others.pop(k, None)
                return k
            conn.others.setdefault(k, _Seen())  # someone was faster: a member, seen next poll
        log.warning("group %s: all %d slots are held; member %s waits for one", self.cluster,
                    self.max_members, self._me.id)
        return None

    def _write_record(self, conn: _Connected) -> None:
        assert conn.slot is not None
        body = self._me.to_json()
        now = time.monotonic()
        if body == conn.published and now - conn.published_at < REFRESH_EVERY:
            return
        # the default exchange routes to the queue by name; x-max-length 1 drops the old record
        try:
            conn.link.channel.basic_publish(exchange="", routing_key=info_queue(
                self.cluster, conn.slot), body=body)
        except Exception as exc:  # pika refuses to publish on a closing channel
            raise LinkError(f"writing the member record: {exc}") from exc
        conn.published = body
        conn.published_at = now

    # -- pause markers -----------------------------------------------------------------------

    def _probes(self) -> Probes:
        if self._conn is None:
            raise LinkError(f"group {self.cluster}: not connected to the coordination broker"
                            + (f" ({self.last_error})" if self.last_error else ""))
        return self._conn.probes

    async def pause(self, shovel: str) -> None:
        """Mark ``shovel`` paused for the whole group (a durable queue).

        :raises LinkError: not connected, or the broker refused
        """
        await self._probes().declare(paused_queue(self.cluster, shovel), durable=True)

    async def resume(self, shovel: str) -> None:
        """Take ``shovel``'s paused marker away (nothing to do when it has none).

        :raises LinkError: not connected, or the broker refused
        """
        await self._probes().delete(paused_queue(self.cluster, shovel))

    async def paused(self, shovels: Iterable[str]) -> frozenset[str]:
        """Which of ``shovels`` are marked paused (a passive declare each, many at once).

        :raises LinkError: not connected, or the broker refused
        """
        probes = self._probes()
        names = sorted(set(shovels))
        states = await _all(probes.state(paused_queue(self.cluster, s)) for s in names)
        return frozenset(s for s, st in zip(names, states, strict=True) if st is QueueState.THERE)


async def _all(requests: Iterable[Any]) -> list[Any]:
    """Run the requests at once, at most :data:`_AT_ONCE` in flight; their results in order,
    or the first failure once all ended (none is left running unobserved)."""
    pending = list(requests)
    out: list[Any] = []
    for start in range(0, len(pending), _AT_ONCE):
        batch = await asyncio.gather(*pending[start:start + _AT_ONCE], return_exceptions=True)
        failed = next((r for r in batch if isinstance(r, BaseException)), None)
        if failed is not None:
            for r in pending[start + _AT_ONCE:]:
                r.close()  # coroutines never started
            raise failed
        out.extend(batch)
    return out


_AT_ONCE = 64  # requests in flight together (each holds a channel while it runs)
