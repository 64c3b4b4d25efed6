"""The streams protocol over TLS (an amqps URI): pumpd's client alone and the Spark reader,
against a private node with ``rabbitmq_stream`` and TLS listeners for AMQP and streams."""

from __future__ import annotations

import ssl
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
from pumpd.spark.read.read_options import parse_read_options
from pumpd.spark.read.streams.protocol import connect
from pumpd.spark.read.streams.wire import FIRST, StreamsConnectError
from pumpd.testing.localnode import LocalNode

from tests.support.amqp_helpers import blocking_connection
from tests.support.tls_helpers import amqps_uri, make_certs, server_listener

# the password of the URIs whose connections fail before they log in: no error may show it
PASSWORD = "tls-s3cret"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def node(certs: Path) -> Iterator[LocalNode]:
    tls = server_listener(certs)
    with LocalNode(plugins=["rabbitmq_stream"], tls=tls) as n:
        yield n


def _stream_with(node: LocalNode, n: int) -> str:
    """A new stream holding messages ``m0`` ... with message ids ``id0`` ... (published over
    plain AMQP: what is under test is the reading)."""
    name = f"tls-{uuid.uuid4().hex[:8]}"
    with blocking_connection(node.uri()) as c:
        ch = c.channel()
        ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
        ch.confirm_delivery()
        for i in range(n):
            ch.basic_publish("", name, f"m{i}".encode(), pika.BasicProperties(message_id=f"id{i}"))
    return name


def _options(uri: str, stream: str, port: int | None) -> Any:
    return parse_read_options({"uri": uri, "stream": stream, "protocol": "stream",
                               "streamPort": str(port)})


def test_a_node_with_streams_and_tls_listens_for_streams_over_tls(node: LocalNode) -> None:
    assert node.stream_tls_port is not None
    assert len({node.amqp_port, node.tls_port, node.stream_port, node.stream_tls_port}) == 4


def test_the_streams_client_alone_reads_a_chunk_over_tls(node: LocalNode, certs: Path) -> None:
    s = _stream_with(node, 10)
    options = _options(amqps_uri(node.tls_port, certs), s, node.stream_tls_port)
    with connect(options, "pumpd test") as conn:
        assert isinstance(conn.sock, ssl.SSLSocket) and conn.sock.version() is not None
        assert conn.sock.getpeercert()["subject"] == ((("commonName", "server"),),)
        conn.subscribe(s, FIRST, credit=1)
        c = conn.chunk()
    assert c.first == 0 and 1 <= c.records <= 10
    assert b"m0" in c.frame[c.data_at:]


def test_a_server_not_signed_by_the_given_ca_is_a_clear_error(node: LocalNode,
                                                              certs: Path) -> None:
    options = _options(amqps_uri(node.tls_port, certs, "other-ca", PASSWORD), "s",
                       node.stream_tls_port)
    with pytest.raises(StreamsConnectError) as info:
        connect(options, "pumpd test", timeout=10)
    msg = str(info.value)
    assert f"TLS handshake with 127.0.0.1:{node.stream_tls_port} failed" in msg, msg
    assert "certificate" in msg and "cacertfile" in msg, msg
    assert PASSWORD not in msg, msg


def test_no_client_certificate_where_the_node_requires_one_is_a_clear_error(
        node: LocalNode, certs: Path) -> None:
    # TLS 1.3: the client's handshake ends before the server's verdict, read with the first frame
    uri = f"amqps://guest:{PASSWORD}@127.0.0.1:{node.tls_port}/%2F?cacertfile={certs}/ca.pem"
    with pytest.raises(StreamsConnectError) as info:
        connect(_options(uri, "s", node.stream_tls_port), "pumpd test", timeout=10)
    msg = str(info.value)
    assert f"TLS handshake with 127.0.0.1:{node.stream_tls_port} failed" in msg, msg
    assert "requires a client certificate" in msg and PASSWORD not in msg, msg


def test_tls_to_the_plain_streams_port_is_a_clear_error(node: LocalNode, certs: Path) -> None:
    options = _options(amqps_uri(node.tls_port, certs, password=PASSWORD), "s", node.stream_port)
    with pytest.raises(StreamsConnectError) as info:
        connect(options, "pumpd test", timeout=10)
    msg = str(info.value)
    assert f"TLS handshake with 127.0.0.1:{node.stream_port} failed" in msg, msg
    assert "plain-text streams port" in msg and PASSWORD not in msg, msg


def test_plain_text_to_the_tls_streams_port_is_a_clear_error(node: LocalNode) -> None:
    options = _options(node.uri(), "s", node.stream_tls_port)
    with pytest.raises(ConnectionError) as info:
        connect(options, "pumpd test", timeout=10)
    msg = str(info.value)
    assert f"127.0.0.1:{node.stream_tls_port}" in msg and "amqps URI" in msg, msg


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    from pumpd.spark import register

    from tests.support import spark_helpers

    session = spark_helpers.spark_session()
    register(session)
    yield session


def test_a_batch_read_over_amqps_reads_the_stream_over_tls(spark: Any, node: LocalNode,
                                                           certs: Path) -> None:
    s = _stream_with(node, 250)
    rows = (spark.read.format("pumpd").option("uri", amqps_uri(node.tls_port, certs))
            .option("stream", s).option("protocol", "stream")
            .option("streamPort", node.stream_tls_port).option("minPartitions", 2)
            .load().collect())
    assert sorted((r.offset, r.message_id, bytes(r.body)) for r in rows) == [
        (i, f"id{i}", f"m{i}".encode()) for i in range(250)]


def test_a_spark_read_with_the_wrong_ca_names_the_problem(spark: Any, node: LocalNode,
                                                          certs: Path) -> None:
    s = _stream_with(node, 1)
    with pytest.raises(Exception) as info:
        (spark.read.format("pumpd")
         .option("uri", amqps_uri(node.tls_port, certs, "other-ca", PASSWORD))
         .option("stream", s).option("streamPort", node.stream_tls_port).load().collect())
    msg = str(info.value)
    assert f"TLS handshake with 127.0.0.1:{node.stream_tls_port} failed" in msg, msg
    assert "certificate" in msg and PASSWORD not in msg, msg



def test_a_stream_destination_publishes_over_tls(node: LocalNode, certs: Path) -> None:
    """A shovel into a stream over the streams protocol's TLS port, its URI an amqps one."""
    from tests.support.harness import running, shovel

    assert node.stream_tls_port is not None and node.tls_port is not None
    src = _stream_with(node, 50)
    dst = f"tls-dst-{uuid.uuid4().hex[:8]}"
    with blocking_connection(node.uri()) as c:
        c.channel().queue_declare(dst, durable=True, arguments={"x-queue-type": "stream"})
    cfg = shovel("tls-dest", sources={"broker": node.uri()}, queue=src,
                 consumer_args={"x-stream-offset": "first"},
                 destinations={"protocol": "stream", "stream": dst,
                               "broker": amqps_uri(node.tls_port, certs),
                               "stream_port": node.stream_tls_port})
    with running(cfg) as pumps:
        pumps.wait_for(lambda: pumps.statuses["tls-dest"].counters.confirmed >= 50, 60,
                       "50 confirmed")
    options = _options(amqps_uri(node.tls_port, certs), dst, node.stream_tls_port)
    with connect(options, "pumpd test") as conn:
        conn.subscribe(dst, FIRST, credit=10)
        c = conn.chunk()
    assert c.first == 0 and b"m0" in c.frame[c.data_at:]
