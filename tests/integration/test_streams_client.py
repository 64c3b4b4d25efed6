"""pumpd's streams-protocol client names the broker's answers: each refusal says the broker
(host:port and vhost), the step in words, the user where the refusal is about the user, and the
code by its ``rabbit_stream.hrl`` name with what it means; never the password. Against a
private node with ``rabbitmq_stream``; the client is called directly (no Spark)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pika
import pytest
from pumpd.config.uri import parse_uri
from pumpd.spark.read.read_options import parse_read_options
from pumpd.spark.read.streams.protocol import StreamProbe, connect
from pumpd.spark.read.streams.wire import FIRST, StreamsError
from pumpd.streams.chunk_probe import chunk_at, last_offset
from pumpd.streams.client import StreamsClient
from pumpd.streams.client import connect as connect_async
from pumpd.streams.errors import StreamsError as AsyncStreamsError
from pumpd.streams.wire import OFFSET
from pumpd.testing.localnode import LocalNode

from tests.support.amqp_helpers import blocking_connection

_T = TypeVar("_T")

# passwords no error may show (long enough that a stray piece of one would be found)
PASSWORD = "str3ams-pass-w0rd"


WRONG_PASSWORD = "n0t-the-pass-w0rd"


@pytest.fixture(scope="module")
def node() -> Iterator[LocalNode]:
    with LocalNode(plugins=["rabbitmq_stream"]) as n:
        yield n


@pytest.fixture(scope="module")
def user(node: LocalNode) -> str:
    """A user with PASSWORD and full permissions on ``/``."""
    return _user(node, "full")


def _user(node: LocalNode, prefix: str, read: str = ".*") -> str:
    """A new user with PASSWORD and full permissions on ``/`` but ``read``."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    node.add_user(name, PASSWORD, "/", read=read)
    return name


def _stream(node: LocalNode) -> str:
    name = f"s-{uuid.uuid4().hex[:8]}"
    with blocking_connection(node.uri()) as c:
        c.channel().queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    return name


def _refusal(node: LocalNode, uri: str, stream: str = "") -> str:
    """The message of the StreamsError that connecting with ``uri`` (and, when given,
    subscribing to ``stream``) raised."""
    options = parse_read_options({"uri": uri, "stream": stream or "s", "protocol": "stream",
                                  "streamPort": str(node.stream_port)})
    with pytest.raises(StreamsError) as info:
        with connect(options, "pumpd test", timeout=20) as conn:
            if stream:
                conn.subscribe(stream, FIRST, credit=1)
    msg = str(info.value)
    assert PASSWORD not in msg and WRONG_PASSWORD not in msg, msg
    return msg


def test_a_wrong_password_is_an_authentication_failure_naming_the_user(
        node: LocalNode) -> None:
    msg = _refusal(node, node.uri(password=WRONG_PASSWORD))
    assert msg == (f"streams protocol 127.0.0.1:{node.stream_port} (vhost '/'): authentication "
                   "refused for user 'guest' (AUTHENTICATION_FAILURE): wrong username or "
                   "password?"), msg


def test_a_user_without_permissions_on_the_vhost_may_not_open_it(node: LocalNode,
                                                                  user: str) -> None:
    vhost = f"v-{uuid.uuid4().hex[:6]}"
    node.add_vhost(vhost)  # the user has permissions on / only
    msg = _refusal(node, node.uri(vhost, user, PASSWORD))
    assert msg == (f"streams protocol 127.0.0.1:{node.stream_port} (vhost {vhost!r}): user "
                   f"{user!r} may not open vhost {vhost!r} (VIRTUAL_HOST_ACCESS_FAILURE): does "
                   "the vhost exist, and does the user have permissions on it?"), msg


def test_a_user_without_read_permission_may_not_read_the_stream(node: LocalNode) -> None:
    s = _stream(node)
    user = _user(node, "reader", read="^$")
    msg = _refusal(node, node.uri("/", user, PASSWORD), s)
    assert msg.startswith(f"streams protocol 127.0.0.1:{node.stream_port} (vhost '/'): user "
                          f"{user!r} may not read stream {s!r} (ACCESS_REFUSED): "), msg
    assert "permissions" in msg, msg


def test_a_stream_that_does_not_exist_is_named(node: LocalNode, user: str) -> None:
    msg = _refusal(node, node.uri("/", user, PASSWORD), "no-such-stream")
    assert msg == (f"streams protocol 127.0.0.1:{node.stream_port} (vhost '/'): cannot read "
                   "stream 'no-such-stream' (STREAM_DOES_NOT_EXIST): it does not exist in the "
                   "vhost"), msg


def test_the_right_password_reads_a_stream(node: LocalNode, user: str) -> None:
    """The same path with nothing wrong: the refusals above are the broker's, not the client's."""
    s = _stream(node)
    with blocking_connection(node.uri()) as c:
        ch = c.channel()
        ch.confirm_delivery()
        ch.basic_publish("", s, b"m0")
    options = parse_read_options({"uri": node.uri("/", user, PASSWORD), "stream": s,
                                  "protocol": "stream", "streamPort": str(node.stream_port)})
    with connect(options, "pumpd test", timeout=20) as conn:
        conn.subscribe(s, FIRST, credit=1)
        assert conn.chunk().first == 0


def test_a_super_stream_that_does_not_exist_is_named(node: LocalNode) -> None:
    options = parse_read_options({"uri": node.uri(), "superStream": "no-such-super",
                                  "protocol": "stream", "streamPort": str(node.stream_port)})
    with pytest.raises(StreamsError) as info, connect(options, "pumpd test", timeout=20) as conn:
        conn.partitions("no-such-super")
    msg = str(info.value)
    assert msg == (f"streams protocol 127.0.0.1:{node.stream_port} (vhost '/'): cannot list the "
                   "partitions of super stream 'no-such-super' (STREAM_DOES_NOT_EXIST): it does "
                   "not exist in the vhost"), msg


def test_the_amqp_port_given_as_the_streams_port_is_named_as_such(node: LocalNode) -> None:
    """The AMQP 0-9-1 listener answers with its protocol header, which read as a frame size is
    over a gigabyte: refused before reading it, naming the port."""
    options = parse_read_options({"uri": node.uri(password=PASSWORD), "stream": "s",
                                  "protocol": "stream", "streamPort": str(node.amqp_port)})
    with pytest.raises(StreamsError) as info:
        connect(options, "pumpd test", timeout=20)
    msg = str(info.value)
    assert msg == (f"streams protocol 127.0.0.1:{node.amqp_port} (vhost '/'): the peer's answer "
                   "(to exchange peer properties) is not a streams protocol frame (a frame of "
                   f"{int.from_bytes(b'AMQP')} bytes): is streamPort the broker's streams port?"), msg



# -- the asyncio client's chunk probe (streams/chunk_probe.py) --------------------------------


def _probe(node: LocalNode, body: Callable[[StreamsClient], Awaitable[_T]]) -> _T:
    """``body(client)`` on an asyncio streams connection to ``node`` as its URI's user."""
    u = parse_uri(node.uri())

    async def main() -> _T:
        assert node.stream_port is not None
        client = await connect_async(host=u.effective_host, port=node.stream_port,
                                     username=u.username, password=u.password, vhost=u.vhost,
                                     step_timeout=20)
        try:
            return await body(client)
        finally:
            await client.close()

    return asyncio.run(main())


def test_the_chunk_probe_reads_a_streams_tail_and_the_chunk_holding_an_offset(
        node: LocalNode) -> None:
    s = _stream(node)
    before = time.time()
    with blocking_connection(node.uri()) as c:
        ch = c.channel()
        ch.confirm_delivery()
        for batch in range(3):  # confirmed batch by batch: three chunks at least
            for i in range(10):
                ch.basic_publish("", s, b"%d" % (batch * 10 + i),
                                 pika.BasicProperties(delivery_mode=2))
    empty = _stream(node)

    async def body(client: StreamsClient) -> tuple[Any, ...]:
        last = await last_offset(client, s, wait=5)
        held = await chunk_at(client, s, OFFSET, 25, wait=5)
        first = await chunk_at(client, s, OFFSET, 0, wait=5)
        nothing = await last_offset(client, empty, wait=0.5)
        # each probe unsubscribed: the same connection goes on reading
        again = await last_offset(client, s, wait=5)
        return last, held, first, nothing, again

    last, held, first, nothing, again = _probe(node, body)
    assert last == again == 29
    assert held.first <= 25 <= held.last
    assert first.first == 0 and first.records >= 1
    # written while this test ran (the node's clock is this machine's)
    assert before - 1 <= held.timestamp / 1000 <= time.time() + 1
    assert nothing is None


def test_the_chunk_probe_names_a_missing_stream(node: LocalNode) -> None:
    async def body(client: StreamsClient) -> str:
        with pytest.raises(AsyncStreamsError) as info:
            await last_offset(client, "no-such-stream", wait=2)
        return str(info.value)

    msg = _probe(node, body)
    assert "cannot read stream 'no-such-stream' (STREAM_DOES_NOT_EXIST)" in msg, msg


def test_a_short_poll_timeout_bounds_the_wait_for_a_chunk_not_the_login(node: LocalNode) -> None:
    """pollTimeoutMs is how long the driver waits for an empty stream's first chunk; the login
    and the requests around it take what a busy broker needs (a millisecond is less)."""
    empty = _stream(node)
    options = parse_read_options({"uri": node.uri(), "stream": empty, "protocol": "stream",
                                  "streamPort": str(node.stream_port), "pollTimeoutMs": "1"})
    for _ in range(5):
        probe = StreamProbe(options)
        try:
            began = time.monotonic()
            assert probe.next_offset(empty) is None
            assert probe.first_offset(empty) is None  # on the connection opened again
            assert time.monotonic() - began < 5
        finally:
            probe.close()
