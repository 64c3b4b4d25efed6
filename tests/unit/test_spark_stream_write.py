"""A Spark write into a stream without Spark or a broker: its options, its publishing ids, rows
as AMQP 1.0 messages (read back through the mapping), and a streams peer that miscounts."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from pumpd.amqp10.message import decode_message
from pumpd.dataplane.properties import encode_properties
from pumpd.spark.read.streams.wire import StreamsConnection, StreamsError
from pumpd.spark.write.partition import PartitionFailed, check_schema
from pumpd.spark.write.stream_messages import RowRefused, StreamMessages
from pumpd.spark.write.stream_partition import MAX_ROWS, StreamPartitionPublisher, producer_id
from pumpd.spark.write.write_options import STREAM_IN_FLIGHT_MAX, parse_options
from pumpd.streams.amqp091_form import container_form, stored_form

URI = "amqp://guest@127.0.0.1:5672/%2F"

# -- options --------------------------------------------------------------------------------------


@pytest.mark.parametrize("options,fragment", [
    ({"stream": "s", "exchange": "x"}, "pumpd option exchange: not for a stream write"),
    ({"stream": "s", "mandatory": "true"}, "pumpd option mandatory: not for a stream write"),
    ({"stream": "s", "persistent": "true"}, "pumpd option persistent: not for a stream write"),
    ({"stream": "s", "declarations": "[]"}, "pumpd option declarations: not for a stream"),
    ({"stream": "s", "maxInFlight": str(STREAM_IN_FLIGHT_MAX + 1)},
     f"pumpd option maxInFlight: at most {STREAM_IN_FLIGHT_MAX} for a stream write"),
    ({"stream": "s", "producerName": "p" * 201}, "pumpd option producerName: longer than"),
    ({"stream": "s", "streamPort": "70000"}, "pumpd option streamPort: must be from 1 to 65535"),
    ({"stream": "s" * 256}, "pumpd option stream: longer than 255 bytes"),
    ({"producerName": "p"}, "pumpd option producerName: only for a stream write"),
    ({"streamPort": "5552"}, "pumpd option streamPort: only for a stream write"),
])
def test_bad_stream_options_are_refused_by_name(options: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_options({"uri": URI, **options})
    assert fragment in str(info.value)


@pytest.mark.parametrize("options,fragment", [
    ({"stream": "s", "superStream": "ss"}, "pumpd options stream and superStream: a write goes "
                                           "to one of them"),
    ({"superStream": "ss", "exchange": "x"}, "pumpd option exchange and option superStream: not "
                                             "for a super stream write"),
    ({"superStream": "ss", "mandatory": "true"}, "pumpd option mandatory and option superStream"),
    ({"superStream": "ss", "declarations": "[]"}, "pumpd option declarations and option "
                                                  "superStream"),
    ({"superStream": "s" * 256}, "pumpd option superStream: longer than 255 bytes"),
])
def test_bad_super_stream_options_are_refused_naming_both(options: dict[str, Any],
                                                          fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_options({"uri": URI, **options})
    assert fragment in str(info.value)


def test_super_stream_options_and_its_exchange_column_refused() -> None:
    o = parse_options({"uri": URI, "superStream": " invoices ", "producerName": "job-7",
                       "routingKey": "k"})
    assert (o.super_stream, o.stream, o.producer_name, o.routing_key) == ("invoices", "",
                                                                          "job-7", "k")
    assert o.to_streams and o.target == "super stream 'invoices'"
    with pytest.raises(ValueError, match="column 'exchange' with option superStream 'invoices'"):
        check_schema([("body", "binary"), ("exchange", "string")], o)


def test_stream_options_and_the_tls_port_by_default() -> None:
    o = parse_options({"uri": URI, "stream": " orders ", "producerName": "job-7"})
    assert (o.stream, o.stream_port, o.producer_name) == ("orders", 5552, "job-7")
    assert parse_options({"uri": "amqps://guest@h/%2F", "stream": "s"}).stream_port == 5551
    assert parse_options({"uri": URI, "stream": "s", "streamPort": "6000"}).stream_port == 6000


def test_the_exchange_column_is_refused_by_name_and_the_basic_properties_taken() -> None:
    options = parse_options({"uri": URI, "stream": "s"})
    with pytest.raises(ValueError, match="column 'exchange' with option stream 's'"):
        check_schema([("body", "binary"), ("exchange", "string")], options)
    check_schema([("body", "binary"), ("delivery_mode", "int"), ("priority", "int"),
                  ("expiration", "string")], options)


# -- publishing ids -------------------------------------------------------------------------------


def test_publishing_ids_grow_within_a_partition_and_across_micro_batches() -> None:
    assert producer_id(0, 0) == (1 << 32) + 1
    assert producer_id(0, MAX_ROWS - 1) < producer_id(1, 0)
    ids = [producer_id(b, r) for b in range(3) for r in (0, 1, 1000, MAX_ROWS - 1)]
    assert ids == sorted(set(ids))
    assert producer_id((1 << 32) - 2, MAX_ROWS - 1) < 1 << 64


# -- rows as AMQP 1.0 messages --------------------------------------------------------------------


def _entries(raw: list[bytes]) -> Iterator[tuple[int, bytes]]:
    """(publishing id, the message's bytes) of each entry."""
    for e in raw:
        pid, size = struct.unpack_from(">QI", e)
        assert size == len(e) - 12
        yield pid, e[12:]


@pytest.mark.parametrize("size", [0, 1, 255, 256, 70_000])
def test_a_body_only_row_is_stored_as_rabbitmq_stores_a_publish_to_the_stream(size: int) -> None:
    body = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    [(pid, m)] = list(_entries(StreamMessages("orders").entries(42, [body])))
    assert (pid, m) == (42, stored_form(b"", b"orders", encode_properties({}), body))


@pytest.mark.parametrize("size", [0, 255, 256])
def test_a_row_for_a_broker_that_stores_containers_is_in_the_container_form(size: int) -> None:
    body = b"c" * size
    messages = StreamMessages("orders", container=True)
    [(_, m)] = list(_entries(messages.entries(1, [body])))
    assert m == container_form(b"", b"orders", encode_properties({}), body)
    [(_, m)] = list(_entries(messages.entries_of_rows(1, [body], {"app_id": ["a"]})))
    assert m == container_form(b"", b"orders", encode_properties({"app_id": "a"}), body)


def test_the_cached_head_and_the_whole_form_agree() -> None:
    messages = StreamMessages("rk")
    bodies = [b"a", b"b" * 300]
    assert messages.entries(7, bodies) == messages.entries_of_rows(7, bodies, {})


def test_per_row_properties_headers_ids_and_routing_keys_are_stored_exactly() -> None:
    messages = StreamMessages("orders")
    columns = {"content_type": ["text/plain", None],
               "headers": [{"n": "1", "k": "v"}, None],
               "correlation_id": [None, "c2"],
               "delivery_mode": [2, None], "priority": [None, 7], "expiration": ["60000", None]}
    got = list(_entries(messages.entries_of_rows(
        100, [b"one", b"two"], columns, ids=[b"id-0", b"id-1"], routing_keys=["r0", None])))
    (p0, m0), (p1, m1) = got
    assert (p0, p1) == (100, 101)
    assert decode_message(m0) == decode_message(stored_form(b"", b"r0", encode_properties(
        {"content_type": "text/plain", "headers": {"n": "1", "k": "v"}, "message_id": "id-0",
         "delivery_mode": 2, "expiration": "60000"}), b"one"))
    assert decode_message(m1) == decode_message(stored_form(b"", b"orders", encode_properties(
        {"correlation_id": "c2", "message_id": "id-1", "priority": 7}), b"two"))


def test_a_row_a_stream_cannot_store_is_refused_naming_the_row_and_the_field() -> None:
    with pytest.raises(RowRefused) as info:
        StreamMessages("s").entries_of_rows(1, [b"a", b"b"], {"cluster_id": [None, "c"]})
    assert info.value.row == 1
    assert "cluster_id" in str(info.value)


# -- a peer that miscounts ------------------------------------------------------------------------


def _response(key: int, corr: int, extra: bytes = b"") -> bytes:
    body = struct.pack(">HHIH", key | 0x8000, 1, corr, 1) + extra
    return struct.pack(">I", len(body)) + body


def _hostile_streams_peer(scripted: bytes, tunes: list[bytes] | None = None, *,
                          to_publish: bool = False) -> tuple[int, threading.Thread]:
    """A streams peer on loopback: it logs the client in (keeping its tune frame in
    ``tunes``) and answers its requests OK (a publisher's last id: 0), and sends ``scripted``
    after the first declare-publisher request, or (``to_publish``) instead of confirming
    each publish."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def read_frame(conn: socket.socket) -> bytes:
        size = b""
        while len(size) < 4:
            got = conn.recv(4 - len(size))
            if not got:
                raise EOFError
            size += got
        (n,) = struct.unpack(">I", size)
        body = b""
        while len(body) < n:
            got = conn.recv(n - len(body))
            if not got:
                raise EOFError
            body += got
        return body

    def serve() -> None:
        conn, _ = server.accept()
        with conn, server:
            for _ in range(3):  # peer properties, SASL handshake, SASL authenticate
                f = read_frame(conn)
                key, _, corr = struct.unpack_from(">HHI", f)
                extra = struct.pack(">i", 0) if key in (0x11, 0x12) else b""
                conn.sendall(_response(key, corr, extra))
            offer = struct.pack(">HHII", 0x14, 1, 1 << 20, 60)
            conn.sendall(struct.pack(">I", len(offer)) + offer)
            tune = read_frame(conn)
            if tunes is not None:
                tunes.append(tune)
            try:
                while True:
                    f = read_frame(conn)
                    key = struct.unpack_from(">H", f)[0]
                    if key == 0x02:  # publish
                        if to_publish:
                            conn.sendall(scripted)
                        continue
                    corr = struct.unpack_from(">I", f, 4)[0]
                    conn.sendall(_response(key, corr, struct.pack(">Q", 0) if key == 0x05
                                           else b""))
                    if key == 0x01 and not to_publish:
                        conn.sendall(scripted)
                    if key == 0x16:  # close
                        return
            except (EOFError, OSError):
                pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return port, t


@pytest.mark.parametrize("key,count,width", [(0x03, 1_000_000, 8), (0x04, 7, 10),
                                             (0x03, -1, 8)])
def test_a_confirm_or_error_frame_counting_more_ids_than_it_holds_is_refused(
        key: int, count: int, width: int) -> None:
    body = struct.pack(">HHBi", key, 1, 0, count) + b"\0" * width  # one id's room only
    port, t = _hostile_streams_peer(struct.pack(">I", len(body)) + body)
    with StreamsConnection("127.0.0.1", port, "u", "p", "/", timeout=5) as conn:
        conn.declare_publisher("s", "p")
        with pytest.raises(StreamsError, match="cannot hold the"):
            conn.outcomes()
    t.join(5)


def test_a_writer_asks_for_no_heartbeat_and_a_reader_takes_the_brokers() -> None:
    for heartbeat, asked in ((0, 0), (None, 60)):
        tunes: list[bytes] = []
        port, t = _hostile_streams_peer(b"", tunes)
        with StreamsConnection("127.0.0.1", port, "u", "p", "/", timeout=5,
                               heartbeat=heartbeat) as conn:
            conn.declare_publisher("s")
            assert conn.tuned_frame_max == 1 << 20
        t.join(5)
        assert struct.unpack(">HHII", tunes[0]) == (0x14, 1, 1 << 20, asked)


def test_a_publish_error_fails_the_task_with_the_code_by_name() -> None:
    error = struct.pack(">HHBiQH", 0x04, 1, 0, 1, (1 << 32) + 1, 18)
    port, t = _hostile_streams_peer(struct.pack(">I", len(error)) + error, to_publish=True)
    options = parse_options({"uri": f"amqp://u@127.0.0.1:{port}/%2F", "password": "s3cret-pw",
                             "stream": "orders", "streamPort": str(port),
                             "confirmTimeoutMs": "5000"})
    pub = StreamPartitionPublisher(options, producer="job", batch=0, partition=3)
    with pytest.raises(PartitionFailed) as info:
        pub.publish_rows([{"body": b"a"}, {"body": b"b"}])
        pub.finish()
    pub.close()
    t.join(5)
    text = str(info.value)
    assert "partition 3" in text and "'orders'" in text and "'job-3'" in text
    assert "PUBLISHER_DOES_NOT_EXIST" in text and f"id {(1 << 32) + 1}" in text
    assert "s3cret-pw" not in text


@pytest.mark.parametrize("option", ["stream", "superStream"])
def test_publish_partition_refuses_a_streams_write(option: str) -> None:
    from pumpd.spark import publish_partition

    with pytest.raises(ValueError, match="not for publish_partition"):
        publish_partition([], uri=URI, **{option: "s"})
