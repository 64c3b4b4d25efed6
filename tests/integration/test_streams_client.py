"""pumpd's streams-protocol client names the broker's answers: each refusal says the broker
(host:port and vhost), the step in words, the user where the refusal is about the user, and the
code by its ``rabbit_stream.hrl`` name with what it means; never the password. Against a
private node with ``rabbitmq_stream``; the client is called directly (no Spark)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from pumpd.spark.read.read_options import parse_read_options
from pumpd.spark.read.streams.protocol import connect
from pumpd.spark.read.streams.wire import FIRST, StreamsError
from pumpd.testing.localnode import LocalNode

from tests.support.amqp_helpers import blocking_connection

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

