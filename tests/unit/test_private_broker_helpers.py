"""The parts of pumpd.testing's private brokers that start nothing: ActiveMQ's generated
configuration and transport detection, the AMQP 1.0 addresses, and the protocol-header probe."""

from __future__ import annotations

import dataclasses
import socket
import threading
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path
from typing import Any

import pytest
from pumpd.testing import Amqp10Address, LocalActiveMQ, LocalNode
from pumpd.testing.activemq_files import (
    ACTIVEMQ_HOME,
    ActiveMQFiles,
    BrokerSettings,
    activemq_xml,
    has_transport,
)
from pumpd.testing.amqp10_endpoint import SASL_HEADER, protocol_header_answer
from pumpd.testing.node_errors import ActiveMQError, LocalNodeError

CORE = "{http://activemq.apache.org/schema/core}"


def _settings(tmp_path: Path, **changes: Any) -> BrokerSettings:
    settings = BrokerSettings(
        broker_name="b1", files=ActiveMQFiles.under(tmp_path), stomp_port=21000,
        amqp_port=21001, amqp_transformer="native", user='u"<&>', password="p'w",
        anonymous=False, memory_limit_mb=64,
    )
    return dataclasses.replace(settings, **changes)


def test_activemq_xml_has_only_what_the_tests_need(tmp_path: Path) -> None:
    root = ET.fromstring(activemq_xml(_settings(tmp_path)))

    broker = root.find(f"{CORE}broker")
    assert broker is not None
    assert broker.get("useJmx") == "false" and broker.get("persistent") == "true"
    assert broker.get("dataDirectory") == str(tmp_path / "data")
    uris = [c.get("uri") for c in broker.iter(f"{CORE}transportConnector")]
    assert uris == ["stomp://127.0.0.1:21000",
                    "amqp://127.0.0.1:21001?transport.transformer=native"]
    [user] = broker.iter(f"{CORE}authenticationUser")
    assert (user.get("username"), user.get("password")) == ('u"<&>', "p'w")
    [auth] = broker.iter(f"{CORE}simpleAuthenticationPlugin")
    assert auth.get("anonymousAccessAllowed") == "false"
    [kahadb] = broker.iter(f"{CORE}kahaDB")
    assert kahadb.get("directory") == str(tmp_path / "data" / "kahadb")


def test_activemq_xml_without_amqp_and_with_anonymous(tmp_path: Path) -> None:
    root = ET.fromstring(activemq_xml(_settings(tmp_path, amqp_port=None, anonymous=True)))
    uris = [c.get("uri") for c in root.iter(f"{CORE}transportConnector")]
    assert uris == ["stomp://127.0.0.1:21000"]
    [auth] = root.iter(f"{CORE}simpleAuthenticationPlugin")
    assert auth.get("anonymousAccessAllowed") == "true"


def test_activemq_xml_refuses_an_unknown_transformer(tmp_path: Path) -> None:
    with pytest.raises(ActiveMQError, match="amqp_transformer 'raw'"):
        activemq_xml(_settings(tmp_path, amqp_transformer="raw"))


def test_has_transport_looks_for_the_factory_in_the_jars(tmp_path: Path) -> None:
    (tmp_path / "lib" / "optional").mkdir(parents=True)
    with zipfile.ZipFile(tmp_path / "lib" / "optional" / "amqp.jar", "w") as z:
        z.writestr("META-INF/services/org/apache/activemq/transport/amqp", "class=X\n")
    (tmp_path / "lib" / "broken.jar").write_bytes(b"not a zip")
    assert has_transport(tmp_path, "amqp")
    assert not has_transport(tmp_path, "stomp")


@pytest.mark.skipif(not (ACTIVEMQ_HOME / "lib").is_dir(), reason="no Debian activemq here")
def test_debians_activemq_has_stomp_and_no_amqp() -> None:
    assert has_transport(ACTIVEMQ_HOME, "stomp")
    assert not has_transport(ACTIVEMQ_HOME, "amqp")


def test_local_activemq_checks_its_sizes_and_names_a_missing_amqp(tmp_path: Path) -> None:
    with pytest.raises(ActiveMQError, match="heap_mb=32"):
        LocalActiveMQ(base_dir=tmp_path, heap_mb=32)
    with pytest.raises(ActiveMQError, match="memory_limit_mb=256"):
        LocalActiveMQ(base_dir=tmp_path, heap_mb=256, memory_limit_mb=256)
    broker = LocalActiveMQ(base_dir=tmp_path, home=tmp_path / "no-amqp-here")
    try:
        assert broker.amqp_port is None and not broker.has_amqp
        with pytest.raises(ActiveMQError, match="no AMQP transport"):
            broker.amqp_url()
        assert broker.command()[-2:] == ["start", f"xbean:file:{tmp_path / 'activemq.xml'}"]
        assert f"-Xmx{broker.heap_mb}m" in broker.command()
    finally:
        broker.close()


def test_local_activemq_start_names_a_missing_installation(tmp_path: Path) -> None:
    broker = LocalActiveMQ(base_dir=tmp_path, home=tmp_path / "nothing")
    try:
        with pytest.raises(ActiveMQError, match="apt-get install --no-install-recommends"):
            broker.start()
    finally:
        broker.close()


def test_amqp10_address_of_a_node_needs_the_plugin() -> None:
    without, with_plugin = LocalNode(), LocalNode(plugins=["rabbitmq_amqp1_0"])
    try:
        with pytest.raises(LocalNodeError, match="rabbitmq_amqp1_0"):
            without.amqp10_address()
        address = with_plugin.amqp10_address("a/b", user="u@x", password="p:w")
        assert address == Amqp10Address("127.0.0.1", with_plugin.amqp_port, "u@x", "p:w",
                                         "vhost:a/b")
        assert address.url() == f"amqp://u%40x:p%3Aw@127.0.0.1:{with_plugin.amqp_port}"
    finally:
        without.close()
        with_plugin.close()


def test_an_anonymous_address_has_no_credentials_in_its_url() -> None:
    assert Amqp10Address("127.0.0.1", 5, None, None).url() == "amqp://127.0.0.1:5"


def _serve_once(answer: bytes) -> tuple[int, threading.Thread]:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        with listener:
            conn, _ = listener.accept()
            with conn:
                conn.recv(8)
                conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return port, thread


@pytest.mark.parametrize("answer", [SASL_HEADER + b"\x00\x00\x00\x10", b"AMQP\x00\x00\x09\x01",
                                    b"AMQ"])
def test_protocol_header_answer_returns_the_first_eight_bytes(answer: bytes) -> None:
    port, thread = _serve_once(answer)
    assert protocol_header_answer("127.0.0.1", port) == answer[:8]
    thread.join(5)


def test_protocol_header_answer_of_nobody_is_empty() -> None:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    assert protocol_header_answer("127.0.0.1", port, timeout=0.5) == b""
    with pytest.raises(ValueError, match="8 bytes"):
        protocol_header_answer("127.0.0.1", port, b"AMQP")
