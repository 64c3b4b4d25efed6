"""A RabbitMQ stream as a destination, over the streams protocol: one connection and one
publisher, seen through the engine's contract (``endpoint.py``) as a :class:`MessageDestination`
on the generic path.

Each message is stored as an AMQP 1.0 message: one from AMQP 1.0 as it came (its bare message
byte for byte), one from AMQP 0-9-1 in the form RabbitMQ 3.x stores a 0-9-1 publish in a stream
(``pumpd.streams.amqp091_form``), which a 0-9-1 consumer of the stream reads back as it was.
The ``x-stream-offset`` a stream source's broker adds to every delivery is the source's reading
position, not part of the message: it is left out.

The publisher is a named producer (its reference: the group, the shovel and the worker index,
stable across restarts and members) unless the publishing ids are ``none``; see
``publishing_ids.py`` for the ids and what the broker does with them. The connection goes to
the stream's leader (``metadata``), else stays where the URI pointed (any node forwards to the
leader). Every publish is confirmed: the broker's confirm is ACCEPT, its publish error REJECT
(the code is logged by name). Credit is a bounded number of unconfirmed publishes.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from ...amqp10.codec import DecodeError, EncodeError
from ...amqp10.message import Message, complete, encode_message, encode_with_annotations
from ...amqp10.values import Symbol, Timestamp, ULong
from ...config.model import BrokerURI, Declaration, ShovelConfig
from ...config.tls import ssl_context, tls_server_name
from ...dataplane.api import Delivered, Returned
from ...streams.amqp091_form import StoredForms, UnstorableMessage, stores_container_form
from ...streams.client import StreamsClient, connect
from ...streams.codes import OK, code_name
from ...streams.errors import StreamsError
from ...streams.routing import MAX_PARTITIONS, partition
from ..endpoint import Edits, Settlement, Unforwardable
from ..link_errors import LinkError
from .publishing_ids import PublishingIds

__all__ = ["MAX_UNCONFIRMED", "WIRE", "StreamDestination", "connect_streams", "open_destination",
           "stream_port"]

log = logging.getLogger("pumpd.streams")

WIRE = "amqp10"  # what it stores: AMQP 1.0 messages
STEP_TIMEOUT = 30.0  # seconds a connection step may take
CLOSE_TIMEOUT = 5.0
#: the most publishes unconfirmed at once (the destination's credit)
MAX_UNCONFIRMED = 10_000
#: the streams ports by URI scheme (RabbitMQ's defaults, the Spark reader's convention)
STREAM_PORTS = {"amqp": 5552, "amqps": 5551}
_OFFSET = Symbol("x-stream-offset")


def stream_port(uri: BrokerURI, configured: int | None) -> int:
    return configured if configured is not None else STREAM_PORTS[uri.scheme]


class StreamDestination:
    """See the module docstring."""

    wire = WIRE
    side = "destination"

    def __init__(self, client: StreamsClient, streams: Sequence[str], reference: str,
                 ids: PublishingIds, *, max_unconfirmed: int = MAX_UNCONFIRMED,
                 super_stream: str | None = None) -> None:
        """``streams``: the one stream, or a super stream's partitions in its order (publisher
        ``i`` publishes to ``streams[i]``)."""
        self.client = client
        self.streams = tuple(streams)
        self.stream = super_stream or self.streams[0]  # as errors and logs name it
        self.super_stream = super_stream
        self.reference = reference if ids.deduplicates else ""
        self.ids = ids
        self.closed: asyncio.Future[BaseException] = client.closed
        self.pause_reading: Callable[..., None] = client.pause_reading
        self._max_unconfirmed = max_unconfirmed
        # (publisher, publishing id) -> sequence number
        self._unconfirmed: dict[tuple[int, int], int] = {}
        self._sequence = 0
        self._confirming = False
        self._on_settled: Callable[[int, int, Settlement], None] | None = None
        self._on_credit: Callable[[], None] | None = None
        self._annotations: dict[Symbol | ULong, Any] = {}
        self._timestamp = False
        # a 0-9-1 message is stored in the form the broker itself gives a 0-9-1 publish
        self._forms = StoredForms(stores_container_form(client.server_properties.get("version",
                                                                                     "")))

    # -- the endpoint -----------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return self.client.is_open

    @property
    def heartbeat(self) -> int:
        return self.client.heartbeat

    def on_blocked(self, callback: Callable[[bool], None]) -> None:
        """The streams protocol blocks no publisher: a broker that takes no more stops reading
        (write pressure)."""

    def on_write_pressure(self, callback: Callable[[bool], None], high_water: int) -> None:
        self.client.on_write_pressure(callback, high_water)

    async def declare(self, declarations: Sequence[Declaration]) -> None:
        if declarations:
            raise LinkError("destination: a stream destination declares nothing (its stream "
                            "must exist)", side=self.side)

    async def expect_confirms(self) -> None:
        self._confirming = True

    async def close_quietly(self) -> None:
        try:
            await asyncio.wait_for(self.client.close(), CLOSE_TIMEOUT)
        except Exception as exc:  # best effort: the socket ends either way
            log.debug("destination: close: %s", exc)
            self.client.abort()

    def abort(self) -> None:
        self.client.abort()

    # -- the stream -------------------------------------------------------------------------

    async def declare_publishers(self) -> None:
        """One publisher per stream, all named alike (a producer's name is per stream).

        :raises LinkError: a stream is missing or refused, naming it
        """
        for publisher, stream in enumerate(self.streams):
            try:
                await self.client.declare_publisher(
                    publisher, self.reference, stream,
                    on_confirm=functools.partial(self._confirmed, publisher),
                    on_error=functools.partial(self._refused, publisher))
            except StreamsError as exc:
                raise LinkError(f"destination: {exc}", side=self.side) from None

    @property
    def position_holder(self) -> str:
        return f"producer {self.reference!r} of stream {self.stream!r}"

    async def resume_offset(self) -> int | None:
        """The source offset to resume at: right after the last one the stream stored under
        this producer (None: nothing stored, or ids that are not source offsets).

        :raises LinkError: the broker cannot be asked
        """
        if self.ids.mode != "source-offset" or self.super_stream is not None:
            # a super stream's partitions each hold a part: the source broker's record is
            # where to resume, and what is sent again is dropped by each partition
            return None
        try:
            sequence = await self.client.query_publisher_sequence(self.reference, self.stream)
        except StreamsError as exc:
            raise LinkError(f"destination: {exc}", side=self.side) from None
        return self.ids.resume_offset(sequence)

    # -- forwarding -------------------------------------------------------------------------

    @property
    def credit_left(self) -> int:
        return max(self._max_unconfirmed - len(self._unconfirmed), 0)

    def on_credit(self, callback: Callable[[], None]) -> None:
        self._on_credit = callback

    def set_edits(self, edits: Edits) -> None:
        # the plugin's forward headers, as message annotations (as an AMQP 1.0 destination)
        self._annotations = {Symbol(f"x-opt-{k}"): v for k, v in edits.hop
                             if k in ("shovelled-by", "shovel-type", "shovel-name")}
        self._timestamp = edits.timestamp_header

    def on_settled(self, callback: Callable[[int, int, Settlement], None]) -> None:
        self._on_settled = callback

    def on_returned(self, callback: Callable[[Returned], None]) -> None:
        """A stream returns nothing."""

    def forward(self, message: Delivered | Message) -> int:
        offset, payload = self._payload(message)
        most = self.client.max_message_size
        if most and len(payload) > most:
            raise Unforwardable(f"an AMQP 1.0 message of {len(payload)} bytes does not fit the "
                                f"streams connection's frame_max ({self.client.frame_max})")
        publisher = self._route(message)
        publishing_id = self.ids.next(message, offset)
        self._sequence += 1
        self._unconfirmed[(publisher, publishing_id)] = self._sequence
        self.client.publish(publisher, [(publishing_id, payload)])
        return self._sequence

    def _route(self, message: Delivered | Message) -> int:
        """The partition a message goes to (0 for a plain stream): by its routing key, a
        0-9-1 message's own, an AMQP 1.0 message's ``x-routing-key`` annotation or else its
        subject."""
        if len(self.streams) == 1:
            return 0
        if isinstance(message, Delivered):
            key = message.routing_key
        else:
            found = (message.message_annotations or {}).get(Symbol("x-routing-key"))
            if not isinstance(found, str):
                try:
                    props = complete(message).properties
                except DecodeError:
                    props = None
                found = props.subject if props is not None else None
            key = found.encode() if isinstance(found, str) else b""
        return partition(bytes(key), len(self.streams))

    def _payload(self, message: Delivered | Message) -> tuple[int | None, bytes]:
        """(a 0-9-1 message's ``x-stream-offset``, read on the way, else None; the bytes to
        publish)."""
        if isinstance(message, Delivered):
            if self._annotations or self._timestamp:
                raise Unforwardable("a stream destination adds no forward or timestamp "
                                    "headers to an AMQP 0-9-1 message (a RabbitMQ 3.x stream "
                                    "would not give them back)")
            try:
                return self._forms.of(message.exchange, message.routing_key,
                                      message.properties, message.body)
            except UnstorableMessage as exc:
                raise Unforwardable(f"not storable in a stream: {exc}") from None
        annotations = message.message_annotations
        edited = False
        if annotations is not None and _OFFSET in annotations:
            annotations = {k: v for k, v in annotations.items() if k != _OFFSET}
            edited = True
        if self._annotations or self._timestamp:
            annotations = dict(annotations or {})
            annotations.update(self._annotations)
            if self._timestamp:
                annotations[Symbol("x-opt-shovelled-timestamp")] = Timestamp(
                    int(time.time() * 1000))
            edited = True
        try:
            if not edited:
                return None, message.raw if message.raw is not None else encode_message(message)
            message.message_annotations = annotations or None
            return None, encode_with_annotations(message)
        except EncodeError as exc:
            raise Unforwardable(f"cannot be encoded for AMQP 1.0: {exc}") from None

    def _settle(self, sequences: list[int], how: Settlement) -> None:
        if self._on_settled is None or not self._confirming or not sequences:
            return
        sequences.sort()
        first = last = sequences[0]
        for s in sequences[1:]:
            if s != last + 1:
                self._on_settled(first, last, how)
                first = s
            last = s
        self._on_settled(first, last, how)

    def _take(self, publisher: int, ids: list[int]) -> list[int] | None:
        was_full = self.credit_left == 0
        sequences = []
        for pid in ids:
            seq = self._unconfirmed.pop((publisher, pid), None)
            if seq is None:
                self.client.fail(f"the broker settled publishing id {pid}, which publisher "
                                 f"{publisher} did not send or was settled already")
                return None
            sequences.append(seq)
        if was_full and self.credit_left and self._on_credit is not None:
            self._on_credit()
        return sequences

    def _confirmed(self, publisher: int, ids: list[int]) -> None:
        sequences = self._take(publisher, ids)
        if sequences is not None:
            self._settle(sequences, Settlement.ACCEPT)

    def _refused(self, publisher: int, errors: list[tuple[int, int]]) -> None:
        for pid, code in errors:
            log.warning("destination: stream %r refused publishing id %d: %s",
                        self.streams[publisher], pid, code_name(code))
        sequences = self._take(publisher, [pid for pid, _code in errors])
        if sequences is not None:
            self._settle(sequences, Settlement.REJECT)


async def connect_streams(uri: BrokerURI, host: str, port: int, client_name: str, *,
                          side: str = "destination") -> StreamsClient:
    """A streams connection to ``host:port`` with ``uri``'s credentials, vhost and TLS.

    :raises LinkError: naming ``side``
    """
    try:
        tls = ssl_context(uri) if uri.scheme == "amqps" else None
        return await connect(host=host, port=port, username=uri.username,
                             password=uri.password, vhost=uri.vhost, tls=tls,
                             server_hostname=tls_server_name(uri) if tls else None,
                             name=client_name, step_timeout=STEP_TIMEOUT,
                             heartbeat=uri.heartbeat if uri.heartbeat is not None else 60)
    except StreamsError as exc:
        raise LinkError(f"{side}: {exc}", side=side) from None
    except (OSError, ValueError) as exc:
        raise LinkError(f"{side}: streams protocol {host}:{port}: {exc}", side=side) from None


async def _to_leader(client: StreamsClient, uri: BrokerURI, port: int, stream: str,
                     client_name: str) -> StreamsClient:
    """The connection to ``stream``'s leader: ``client`` when it is there (its node advertises
    the leader's address, so a proxy or load balancer in front of it is kept) or the leader
    cannot be reached (any node forwards to the leader).

    :raises LinkError: the stream does not exist or has no leader, by its code's name
    """
    try:
        meta = (await client.metadata([stream])).get(stream)
    except StreamsError as exc:
        raise LinkError(f"destination: {exc}", side="destination") from None
    if meta is None or meta.code != OK or meta.leader is None:
        why = "no answer for it" if meta is None else code_name(meta.code)
        raise LinkError(f"destination: stream {stream!r} in vhost {uri.vhost!r}: {why}",
                        side="destination")
    leader = meta.leader
    if leader in (client.advertised, (uri.effective_host, port)):
        return client
    try:
        moved = await connect_streams(uri, leader.host, leader.port, client_name)
    except LinkError as exc:
        log.info("destination: stream %r's leader %s:%d cannot be reached (%s); publishing "
                 "through %s", stream, leader.host, leader.port, exc, client.address)
        return client
    await client.close()
    return moved


async def open_destination(uri: BrokerURI, client_name: str, cfg: ShovelConfig, *,
                           reference: str, publishing_id: str) -> StreamDestination:
    """The stream destination of ``cfg`` with its publishers declared: on the stream's leader,
    or for a super stream one publisher per partition (any node forwards to the leaders).

    :raises LinkError: naming the destination side
    """
    port = stream_port(uri, cfg.destination.stream_port)
    client = await connect_streams(uri, uri.effective_host, port, client_name)
    try:
        super_stream = cfg.destination.super_stream
        if super_stream is not None:
            streams = await _partitions(client, super_stream)
        else:
            assert cfg.destination.stream is not None  # the configuration requires one
            streams = [cfg.destination.stream]
            client = await _to_leader(client, uri, port, streams[0], client_name)
        destination = StreamDestination(client, streams, reference, PublishingIds(publishing_id),
                                        super_stream=super_stream)
        await destination.declare_publishers()
    except BaseException:
        client.abort()
        raise
    return destination


async def _partitions(client: StreamsClient, super_stream: str) -> list[str]:
    """:raises LinkError: the super stream is missing, has no partitions or too many"""
    try:
        streams = await client.partitions(super_stream)
    except StreamsError as exc:
        raise LinkError(f"destination: {exc}", side="destination") from None
    if not streams or len(streams) > MAX_PARTITIONS:
        raise LinkError(f"destination: super stream {super_stream!r} has {len(streams)} "
                        f"partitions (1 to {MAX_PARTITIONS} can be published to)",
                        side="destination")
    return streams
