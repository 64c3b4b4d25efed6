"""pumpd's streams-protocol client names the broker's answers: each refusal says the broker
(host:port and vhost), the step in words, the user where the refusal is about the user, and the
code by its ``rabbit_stream.hrl`` name with what it means; never the password. Against a
private node with ``rabbitmq_stream``; the client is called directly (no Spark)."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator

import pytest
from pumpd.spark.read_options import parse_read_options
from pumpd.spark.stream_protocol import connect
from pumpd.spark.streams_codes import COMMANDS, RESPONSE_CODES, command_name, refusal
from pumpd.spark.streams_wire import FIRST, StreamsError
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


def test_a_peer_that_never_answers_times_out_naming_the_step() -> None:
    """A listening socket that accepts (the kernel's backlog) and never says a word."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        options = parse_read_options({"uri": f"amqp://guest:{PASSWORD}@127.0.0.1:1/%2F",
                                      "stream": "s", "protocol": "stream",
                                      "streamPort": str(port)})
        with pytest.raises(TimeoutError) as info:
            connect(options, "pumpd test", timeout=0.5)
    msg = str(info.value)
    assert msg == (f"streams protocol 127.0.0.1:{port} (vhost '/'): no answer from the broker "
                   "within 0.5 s (to exchange peer properties)"), msg


# -- the tables, against rabbit_stream.hrl (rabbitmq_stream_common) ---------------------------


def test_every_response_code_of_rabbit_stream_hrl_has_its_name_and_a_sentence() -> None:
    names = {code: c.name for code, c in RESPONSE_CODES.items()}
    assert names == {
        1: "OK", 2: "STREAM_DOES_NOT_EXIST", 3: "SUBSCRIPTION_ID_ALREADY_EXISTS",
        4: "SUBSCRIPTION_ID_DOES_NOT_EXIST", 5: "STREAM_ALREADY_EXISTS",
        6: "STREAM_NOT_AVAILABLE", 7: "SASL_MECHANISM_NOT_SUPPORTED",
        8: "AUTHENTICATION_FAILURE", 9: "SASL_ERROR", 10: "SASL_CHALLENGE",
        11: "SASL_AUTHENTICATION_FAILURE_LOOPBACK", 12: "VIRTUAL_HOST_ACCESS_FAILURE",
        13: "UNKNOWN_FRAME", 14: "FRAME_TOO_LARGE", 15: "INTERNAL_ERROR", 16: "ACCESS_REFUSED",
        17: "PRECONDITION_FAILED", 18: "PUBLISHER_DOES_NOT_EXIST", 19: "NO_OFFSET",
        20: "SASL_CANNOT_CHANGE_MECHANISM", 21: "SASL_CANNOT_CHANGE_USERNAME"}
    assert all(len(c.meaning) > 10 for c in RESPONSE_CODES.values())


def test_command_keys_are_named() -> None:
    assert len(COMMANDS) == 31 and COMMANDS[0x13] == "SASL_AUTHENTICATE"
    assert command_name(0x8007) == "SUBSCRIBE response"
    assert command_name(0x0040) == "unknown command 0x0040"


def test_a_code_pumpd_does_not_know_says_so() -> None:
    assert refusal(99, "read stream 's'", "u") == "cannot read stream 's': code 99 (unknown to pumpd)"


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
