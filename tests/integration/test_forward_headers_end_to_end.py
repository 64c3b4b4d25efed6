"""Forward and timestamp headers end to end, with a publisher and a consumer that are not pika
(a raw AMQP client on pamqp's codec, which writes and reads each field type exactly), through
a pumpd shovel and beside the Shovel plugin on the same node."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from typing import Any

import aiormq
import pamqp.commands as cmd
import pamqp.decode
import pamqp.frame
import pamqp.header
from pumpd.config.uri import parse_uri
from pumpd.dataplane.frames import (
    FRAME_BODY,
    FRAME_HEADER,
    content_header_payload,
    frame,
)
from pumpd.dataplane.properties import (
    HEADERS_INDEX,
    split_properties,
    table_entries,
)
from pumpd.engine.status import State
from pumpd.testing.localnode import LocalNode

from tests.support.harness import running, shovel
from tests.support.header_tables import (
    EVERY_TYPE,
    EXPECTED_VALUES,
    decode_table,
    entries_by_key,
    headers_of,
    raw_props,
    table,
)


class RawClient:
    """A minimal AMQP 0-9-1 client on pamqp's codec that writes and reads content headers as
    raw bytes, so every field type goes through exactly as written (pika cannot write B, L, d, f,
    u, i and decimals with places, and re-encodes what it reads)."""

    def __init__(self, uri: str) -> None:
        u = parse_uri(uri)
        self.sock = socket.create_connection((u.effective_host, u.port), timeout=10)
        self.buf = b""
        self.sock.sendall(pamqp.frame.marshal(pamqp.header.ProtocolHeader(), 0))
        self.expect(cmd.Connection.Start)
        self.send(0, cmd.Connection.StartOk(
            client_properties={"product": "pumpd test raw client"}, mechanism="PLAIN",
            response=f"\0{u.username}\0{u.password}", locale="en_US"))
        tune = self.expect(cmd.Connection.Tune)
        self.send(0, cmd.Connection.TuneOk(tune.channel_max, tune.frame_max, 0))
        self.send(0, cmd.Connection.Open(u.vhost))
        self.expect(cmd.Connection.OpenOk)
        self.send(1, cmd.Channel.Open())
        self.expect(cmd.Channel.OpenOk)
        self.send(1, cmd.Confirm.Select())
        self.expect(cmd.Confirm.SelectOk)

    def send(self, channel: int, method: Any) -> None:
        self.sock.sendall(pamqp.frame.marshal(method, channel))

    def read_frame(self) -> tuple[int, bytes]:
        while True:
            if len(self.buf) >= 7:
                size = struct.unpack_from(">I", self.buf, 3)[0]
                if len(self.buf) >= 8 + size:
                    raw, self.buf = self.buf[: 8 + size], self.buf[8 + size :]
                    return raw[0], raw
            chunk = self.sock.recv(65536)
            assert chunk, "connection closed"
            self.buf += chunk

    def expect(self, kind: type) -> Any:
        ftype, raw = self.read_frame()
        assert ftype == 1, f"frame type {ftype}"
        value = pamqp.frame.unmarshal(raw)[2]
        assert isinstance(value, kind), value
        return value

    def publish(self, queue: str, props: bytes, body: bytes) -> None:
        self.send(1, cmd.Basic.Publish(exchange="", routing_key=queue))
        self.sock.sendall(frame(FRAME_HEADER, 1, content_header_payload(len(body), props))
                          + frame(FRAME_BODY, 1, body))
        self.expect(cmd.Basic.Ack)

    def get(self, queue: str, timeout: float = 30) -> tuple[bytes, bytes] | None:
        """(raw properties, body) of one message taken from ``queue``, waiting for it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.send(1, cmd.Basic.Get(queue=queue, no_ack=True))
            _, raw = self.read_frame()
            if isinstance(pamqp.frame.unmarshal(raw)[2], cmd.Basic.GetEmpty):
                time.sleep(0.1)
                continue
            _, header = self.read_frame()
            size = struct.unpack_from(">Q", header, 11)[0]
            body = b""
            while len(body) < size:
                _, part = self.read_frame()
                body += part[7:-1]
            return header[19:-1], body
        return None

    def declare(self, queue: str) -> None:
        self.send(1, cmd.Queue.Declare(queue=queue, durable=True))
        self.expect(cmd.Queue.DeclareOk)

    def close(self) -> None:
        self.sock.close()


async def _aiormq_get(uri: str, queue: str, timeout: float = 30) -> dict[str, Any]:
    """The headers of one message taken from ``queue`` by aiormq, as it decodes them."""
    connection = await aiormq.connect(uri)
    try:
        channel = await connection.channel()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = await channel.basic_get(queue, no_ack=True)
            if isinstance(message.delivery, cmd.Basic.GetOk):
                return dict(message.header.properties.headers or {})
            await asyncio.sleep(0.1)
        raise AssertionError(f"nothing arrived in {queue}")
    finally:
        await connection.close()


def _plugin_shovel(node: LocalNode, vhost: str, name: str, value: dict[str, Any]) -> None:
    import json

    node.ctl("set_parameter", "-p", vhost, "shovel", name, json.dumps(value))


def test_end_to_end_every_type_arrives_intact_and_the_hop_matches_the_plugins(
    node_a: LocalNode, vhost_a: str
) -> None:
    uri = node_a.uri(vhost_a)
    client = RawClient(uri)
    try:
        for q in ("in", "out", "in-plugin", "out-plugin"):
            client.declare(q)
        props = raw_props(table(*EVERY_TYPE), message_id="m-1", delivery_mode=2)
        base = {"src-uri": uri, "dest-uri": uri, "dest-add-forward-headers": True,
                "dest-add-timestamp-header": True}
        _plugin_shovel(node_a, vhost_a, "fwd", {**base, "src-queue": "in-plugin",
                                                "dest-queue": "out-plugin"})
        s = shovel("fwd", **base, **{"src-queue": "in", "dest-queue": "out"})
        with running(s) as pumps:
            pumps.wait_for(lambda: pumps.status("fwd").state == State.RUNNING, 30, "running")
            client.publish("in", props, b"payload")
            client.publish("in", props, b"payload")
            client.publish("in-plugin", props, b"payload")
            got = client.get("out")
            seen_by_aiormq = asyncio.run(_aiormq_get(uri, "out"))
            got_plugin = client.get("out-plugin")
        node_a.ctl("clear_parameter", "-p", vhost_a, "shovel", "fwd")
    finally:
        client.close()
    assert got is not None and got_plugin is not None, "not forwarded"
    out_props, body = got
    assert body == b"payload"
    headers = headers_of(out_props)
    originals = entries_by_key(table(*EVERY_TYPE))
    arrived = entries_by_key(headers)
    for key, raw in originals.items():
        assert arrived[key] == raw, key  # the same type and value, to the byte
    values = split_properties(out_props)
    assert values[:HEADERS_INDEX] + values[HEADERS_INDEX + 1:] == \
        [v for i, v in enumerate(split_properties(props)) if i != HEADERS_INDEX]
    decoded = decode_table(headers)
    for key, value in EXPECTED_VALUES.items():
        assert decoded[key] == value, key
        assert seen_by_aiormq[key] == value, key
        assert type(seen_by_aiormq[key]) is type(value), key
    (hop,) = decoded["x-shovelled"]
    plugin_headers = decode_table(headers_of(got_plugin[0]))
    (plugin_hop,) = plugin_headers["x-shovelled"]
    assert list(hop) == list(plugin_hop)  # key for key, in the plugin's order
    assert hop == {**plugin_hop, "shovelled-by": f"pumpd@{socket.gethostname()}",
                   "src-queue": "in", "dest-queue": "out"}
    assert hop["src-uri"] == f"amqp://127.0.0.1:{node_a.amqp_port}/{vhost_a}"
    stamp = [e for e in table_entries(headers) if e[0] == b"x-shovelled-timestamp"]
    assert [headers[vpos] for _, _, vpos, _ in stamp] == [ord("l")]


def test_end_to_end_a_second_hop_goes_first(node_a: LocalNode, vhost_a: str) -> None:
    uri = node_a.uri(vhost_a)
    client = RawClient(uri)
    try:
        for q in ("in", "mid", "out"):
            client.declare(q)
        first = shovel("hop-1", **{"src-uri": uri, "src-queue": "in", "dest-uri": uri,
                                   "dest-queue": "mid", "dest-add-forward-headers": True})
        second = shovel("hop-2", **{"src-uri": uri, "src-queue": "mid", "dest-uri": uri,
                                    "dest-queue": "out", "dest-add-forward-headers": True,
                                    "dest-add-timestamp-header": True})
        with running(first, second) as pumps:
            for name in ("hop-1", "hop-2"):
                pumps.wait_for(lambda n=name: pumps.status(n).state == State.RUNNING, 30, name)
            client.publish("in", raw_props(table(*EVERY_TYPE)), b"twice")
            got = client.get("out")
    finally:
        client.close()
    assert got is not None, "not forwarded"
    headers = headers_of(got[0])
    arrived = entries_by_key(headers)
    for key, raw in entries_by_key(table(*EVERY_TYPE)).items():
        assert arrived[key] == raw, key
    hops = decode_table(headers)["x-shovelled"]
    assert [(h["shovel-name"], h["src-queue"], h["dest-queue"]) for h in hops] == [
        ("hop-2", "mid", "out"), ("hop-1", "in", "mid")]

