"""amqps URIs with the plugin's five TLS parameters, against a node with a TLS listener."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from pumpd.engine.status import State
from pumpd.testing.localnode import LocalNode

from tests.support.amqp_helpers import Message, declare_queue, drain_queue, publish_messages
from tests.support.harness import running, shovel
from tests.support.tls_helpers import amqps_uri, make_certs, server_listener


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def tls_node(certs: Path) -> Iterator[LocalNode]:
    tls = server_listener(certs)
    with LocalNode(tls=tls) as node:
        yield node


def amqps(node: LocalNode, certs: Path, ca: str = "ca") -> str:
    return amqps_uri(node.tls_port, certs, ca)


def test_amqps_with_client_certificates_moves_messages(tls_node: LocalNode, certs: Path) -> None:
    plain = tls_node.uri("/")
    declare_queue(plain, "tls-in")
    publish_messages(plain, "", "tls-in", [Message(b"secure %d" % i) for i in range(100)])
    s = shovel(
        sources={"broker": amqps(tls_node, certs)},
        destinations={"broker": amqps(tls_node, certs),
                      "declarations": [{"queue.declare": {"queue": "tls-out", "durable": True}}]},
        queue="tls-in", publish_fields={"exchange": "", "routing_key": "tls-out"})
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status().counters.acked == 100, 60, "100 over TLS")
    got = drain_queue(plain, "tls-out", expected=100, timeout=10)
    assert [d.body for d in got] == [b"secure %d" % i for i in range(100)]


def test_the_connections_really_use_tls(tls_node: LocalNode, certs: Path) -> None:
    plain = tls_node.uri("/")
    declare_queue(plain, "tls-q")
    s = shovel(sources={"broker": amqps(tls_node, certs)}, destinations={"broker": plain}, queue="tls-q")
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status().state == State.RUNNING, 30, "running")
        listed = tls_node.ctl("list_connections", "-q", "--no-table-headers", "ssl", "peer_cert_subject")
    assert "true\tCN=client" in listed.replace(" ", "\t"), listed


def test_a_server_not_signed_by_the_given_ca_is_refused(tls_node: LocalNode, certs: Path) -> None:
    s = shovel(sources={"broker": amqps(tls_node, certs, ca="other-ca")},
               destinations={"broker": tls_node.uri("/")}, queue="q", reconnect_delay=0)
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status().state == State.TERMINATED, 30, "terminated")
    reason = pumps.status().reason or ""
    assert "certificate" in reason.lower(), reason


def test_tls_files_that_cannot_be_loaded_are_a_failure_in_one_line(
        tls_node: LocalNode, certs: Path, tmp_path: Path) -> None:
    """A key file that is not a key (or is missing) fails the session with a reason naming the
    side, and the shovel goes on as after any failure: no traceback, no crashed pump."""
    bad = tmp_path / "not-a-key.pem"
    bad.write_text("not a key\n")
    uri = amqps(tls_node, certs).replace(quote(str(certs / "client.key"), safe="/"),
                                         quote(str(bad), safe="/"))
    s = shovel(sources={"broker": uri}, destinations={"broker": tls_node.uri("/")}, queue="q",
               reconnect_delay=0)
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status().state == State.TERMINATED, 30, "terminated")
    reason = pumps.status().reason or ""
    assert reason.startswith("source: ") and "cannot load the TLS files" in reason, reason
    assert "\n" not in reason
