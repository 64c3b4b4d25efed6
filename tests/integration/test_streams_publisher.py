"""pumpd's asyncio streams client publishes to a private node: a named producer's messages are
confirmed, its sequence is the last publishing id stored, a message re-sent with an id at or
below it is confirmed and dropped (deduplication), and an AMQP 0-9-1 consumer reads each stored
message once; metadata names the stream's leader; a stream that does not exist is refused by
name."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest
from pumpd.spark.read.read_options import parse_read_options
from pumpd.spark.read.streams.protocol import connect as blocking_connect
from pumpd.streams.amqp091_form import stores_container_form
from pumpd.streams.client import StreamsClient, connect
from pumpd.streams.errors import StreamsError
from pumpd.testing.localnode import LocalNode

from tests.support.amqp_helpers import blocking_connection

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def node() -> Iterator[LocalNode]:
    with LocalNode(plugins=["rabbitmq_stream"]) as n:
        yield n


def _stream(node: LocalNode) -> str:
    name = f"s-{uuid.uuid4().hex[:8]}"
    with blocking_connection(node.uri()) as c:
        c.channel().queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    return name


def _read(node: LocalNode, stream: str, count: int) -> list[bytes]:
    """The bodies of the first ``count`` messages of ``stream``, read over AMQP 0-9-1."""
    bodies: list[bytes] = []
    with blocking_connection(node.uri()) as c:
        ch = c.channel()
        ch.basic_qos(prefetch_count=100)
        for method, _p, body in ch.consume(stream, arguments={"x-stream-offset": "first"},
                                           inactivity_timeout=3):
            if body is None:
                break
            ch.basic_ack(method.delivery_tag)
            bodies.append(body)
            if len(bodies) >= count + 5:
                break
        ch.cancel()
    return bodies


async def _open(node: LocalNode) -> StreamsClient:
    assert node.stream_port is not None
    return await connect(host="127.0.0.1", port=node.stream_port, username="guest",
                         password="guest", vhost="/", step_timeout=20)


def _data(text: str) -> bytes:
    raw = text.encode()
    return b"\x00\x53\x75\xa0" + bytes([len(raw)]) + raw  # a data section, vbin8


class _Outcomes:
    """A publisher's confirms and errors, as they come."""

    def __init__(self) -> None:
        self.confirmed: list[int] = []
        self.errors: list[tuple[int, int]] = []

    def on_confirm(self, ids: list[int]) -> None:
        self.confirmed.extend(ids)

    def on_error(self, errors: list[tuple[int, int]]) -> None:
        self.errors.extend(errors)

    async def settled(self, count: int) -> list[int]:
        for _ in range(300):
            if len(self.confirmed) + len(self.errors) >= count:
                break
            await asyncio.sleep(0.1)
        assert self.errors == []
        return sorted(self.confirmed)


def test_a_named_producer_publishes_once(node: LocalNode) -> None:
    stream = _stream(node)

    async def main() -> None:
        client = await _open(node)
        meta = await client.metadata([stream])
        assert meta[stream].leader is not None
        assert meta[stream].leader.port == node.stream_port
        assert await client.query_publisher_sequence("pumpd-test", stream) == 0
        outcomes = _Outcomes()
        await client.declare_publisher(0, "pumpd-test", stream, on_confirm=outcomes.on_confirm,
                                       on_error=outcomes.on_error)
        client.publish(0, [(i, _data(f"m{i}")) for i in range(1, 101)])
        assert await outcomes.settled(100) == list(range(1, 101))
        assert await client.query_publisher_sequence("pumpd-test", stream) == 100
        await client.close()
        # a new connection re-sends 51..150: 51..100 are confirmed and dropped
        client = await _open(node)
        outcomes = _Outcomes()
        await client.declare_publisher(5, "pumpd-test", stream, on_confirm=outcomes.on_confirm,
                                       on_error=outcomes.on_error)
        client.publish(5, [(i, _data(f"m{i}")) for i in range(51, 151)])
        assert await outcomes.settled(100) == list(range(51, 151))
        assert await client.query_publisher_sequence("pumpd-test", stream) == 150
        await client.delete_publisher(5)
        await client.close()

    asyncio.run(main())
    assert _read(node, stream, 150) == [f"m{i}".encode() for i in range(1, 151)]


def test_a_stream_that_does_not_exist_is_refused_by_name(node: LocalNode) -> None:
    async def main() -> None:
        client = await _open(node)
        meta = await client.metadata(["no-such-stream"])
        assert meta["no-such-stream"].leader is None
        with pytest.raises(StreamsError, match=r"cannot declare publisher 0 on stream "
                                               r"'no-such-stream' \(STREAM_DOES_NOT_EXIST\)"):
            await client.declare_publisher(0, "r", "no-such-stream",
                                           on_confirm=lambda ids: None, on_error=lambda e: None)
        await client.close()

    asyncio.run(main())


def test_both_streams_clients_read_the_version_the_broker_gives_over_amqp(
        node: LocalNode) -> None:
    """The version a stream destination and a Spark stream write choose a stored form by."""
    with blocking_connection(node.uri()) as c:
        version = c._impl.server_properties["version"]
    version = version.decode() if isinstance(version, bytes) else version

    async def asyncio_client() -> str:
        client = await _open(node)
        try:
            return client.server_properties["version"]
        finally:
            await client.close()

    assert asyncio.run(asyncio_client()) == version
    options = parse_read_options({"uri": node.uri(), "stream": "s", "protocol": "stream",
                                  "streamPort": str(node.stream_port)})
    with blocking_connect(options, "pumpd test", timeout=20) as conn:
        assert conn.server_properties["version"] == version
    assert stores_container_form(version) is (tuple(map(int, version.split(".")[:2])) >= (3, 13))
