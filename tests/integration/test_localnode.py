"""Tests of pumpd.testing.localnode and of the shared fixtures (conftest.py) built on it.

A few tests come in ordered pairs: the first leaves a node down or a vhost behind, the second
checks the fixtures put things right. Run alone, the second one passes trivially (or skips)."""

from __future__ import annotations

import os
import time
import urllib.parse
import uuid
from pathlib import Path

import pika
import pika.exceptions
import pytest
from pumpd.testing.localnode import (
    LocalNode,
    LocalNodeError,
    ManagementHTTPError,
    broker_answers,
)

from tests.support import amqp_helpers as amqp

PERSISTENT = 2


def node_processes(node: LocalNode, pgid: int | None) -> list[str]:
    """Live processes belonging to ``node``: in its process group, or with its base dir on
    their command line (beam.smp has ``-home <base_dir>``). Fully dead zombies don't count."""
    found: list[str] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path("/proc", entry, "stat").read_text()
            cmdline = Path("/proc", entry, "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if fields[0] in ("Z", "X") and int(fields[17]) <= 1:
            continue
        if (pgid is not None and int(fields[2]) == pgid) or str(node.base_dir) in cmdline:
            found.append(f"{entry}: {cmdline[:200]}")
    return found


def test_nodes_answer_amqp_on_their_own_ports(node_a: LocalNode, node_b: LocalNode) -> None:
    assert len({node_a.amqp_port, node_a.dist_port, node_b.amqp_port, node_b.dist_port}) == 4
    for node in (node_a, node_b):
        assert node.amqp_port != 5672 and node.dist_port != 25672
        assert node.is_running() and node.answers()
        with amqp.blocking_connection(node.uri()) as connection:
            assert connection.channel().is_open
        assert node.nodename in node.ctl("-q", "eval", "node().")
    assert node_a.management_port is not None and node_b.management_port is None


def test_publish_and_consume(node_b: LocalNode, vhost_b: str) -> None:
    uri = node_b.uri(vhost_b)
    amqp.declare_queue(uri, "work", durable=True)
    messages = [
        amqp.Message(
            f"m{i}".encode(),
            pika.BasicProperties(message_id=str(i), headers={"i": i}, content_type="text/plain"),
        )
        for i in range(50)
    ]
    amqp.publish_messages(uri, "", "work", messages)
    assert amqp.queue_depth(uri, "work") == (50, 0)

    got = amqp.drain_queue(uri, "work", expected=50, timeout=10)

    assert [d.body for d in got] == [m.body for m in messages]
    assert [d.properties.message_id for d in got] == [str(i) for i in range(50)]
    assert got[7].properties.headers == {"i": 7}
    assert all(not d.method.redelivered for d in got)
    assert amqp.queue_depth(uri, "work") == (0, 0)


def test_drain_queue_without_expected_takes_what_is_there(node_b: LocalNode, vhost_b: str) -> None:
    uri = node_b.uri(vhost_b)
    amqp.declare_queue(uri, "q", durable=False)
    amqp.publish_messages(uri, "", "q", [amqp.Message(b"x%d" % i) for i in range(5)])
    assert [d.body for d in amqp.drain_queue(uri, "q")] == [b"x0", b"x1", b"x2", b"x3", b"x4"]
    assert amqp.drain_queue(uri, "q") == []


def test_drain_queue_stops_at_expected_and_leaves_the_rest(node_b: LocalNode, vhost_b: str) -> None:
    uri = node_b.uri(vhost_b)
    amqp.declare_queue(uri, "q")
    amqp.publish_messages(uri, "", "q", [amqp.Message(b"%d" % i) for i in range(10)])
    assert [d.body for d in amqp.drain_queue(uri, "q", expected=4)] == [b"0", b"1", b"2", b"3"]
    assert amqp.queue_depth(uri, "q") == (6, 0)
    # Fewer than expected: returns what came within the timeout.
    assert len(amqp.drain_queue(uri, "q", expected=100, timeout=1.0)) == 6


def test_kill_then_restart_keeps_durable_queue_and_persistent_messages(
    node_b: LocalNode, vhost_b: str
) -> None:
    uri = node_b.uri(vhost_b)
    amqp.declare_queue(uri, "durable-q", durable=True)
    amqp.declare_queue(uri, "transient-q", durable=False)
    bodies = [b"persistent-%d" % i for i in range(20)]
    props = pika.BasicProperties(delivery_mode=PERSISTENT)
    amqp.publish_messages(uri, "", "durable-q", [amqp.Message(b, props) for b in bodies], confirm=True)
    # The confirms mean the messages are on disk; the queue's own record may not be yet: mnesia's
    # transaction log (most likely its disk_log write buffer) can hold it for a moment, and a
    # kill -9 then loses the queue (seen under load: 404 after the restart). Dump the log first,
    # as a broker that had run for a second would have.
    node_b.ctl("eval", "mnesia:dump_log().")
    old_pid = node_b.pid
    ports = (node_b.amqp_port, node_b.dist_port)

    node_b.kill()

    assert not node_b.is_running()
    assert not node_b.answers()
    assert node_processes(node_b, old_pid) == []

    node_b.restart()

    assert node_b.pid != old_pid
    assert (node_b.amqp_port, node_b.dist_port) == ports
    assert amqp.queue_depth(uri, "durable-q") == (20, 0)
    assert [d.body for d in amqp.drain_queue(uri, "durable-q", expected=20)] == bodies
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        amqp.queue_depth(uri, "transient-q")
    assert excinfo.value.reply_code == 404


def test_stop_leaves_node_down(node_b: LocalNode) -> None:
    """First of a pair: stops node_b gracefully and leaves it down for the next test."""
    pgid = node_b.pid
    node_b.stop()
    assert not node_b.is_running()
    assert not node_b.answers()
    assert node_processes(node_b, pgid) == []


def test_fixture_restarts_a_stopped_node(node_b: LocalNode, vhost_b: str) -> None:
    """Second of the pair: the node_b fixture brought the node back."""
    assert node_b.is_running() and node_b.answers()
    uri = node_b.uri(vhost_b)
    amqp.declare_queue(uri, "q")
    amqp.publish_messages(uri, "", "q", [amqp.Message(b"after-restart")])
    assert [d.body for d in amqp.drain_queue(uri, "q", expected=1)] == [b"after-restart"]


_vhosts_seen: list[str] = []


@pytest.mark.parametrize("round_", [1, 2])
def test_vhost_fixture_isolates(node_a: LocalNode, vhost_a: str, round_: int) -> None:
    """Both rounds use the same queue name; each must find it new and empty."""
    assert vhost_a not in _vhosts_seen
    _vhosts_seen.append(vhost_a)
    uri = node_a.uri(vhost_a)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        amqp.queue_depth(uri, "shared-name")
    assert excinfo.value.reply_code == 404
    amqp.declare_queue(uri, "shared-name")
    amqp.publish_messages(uri, "", "shared-name", [amqp.Message(b"round %d" % round_)])
    assert amqp.queue_depth(uri, "shared-name") == (1, 0)
    # Not visible from the default vhost.
    with pytest.raises(pika.exceptions.ChannelClosedByBroker):
        amqp.queue_depth(node_a.uri("/"), "shared-name")


def test_vhost_fixture_deletes_its_vhosts(node_a: LocalNode) -> None:
    if not _vhosts_seen:
        pytest.skip("run together with test_vhost_fixture_isolates")
    existing = set(node_a.ctl("-q", "list_vhosts").split())
    assert existing.isdisjoint(_vhosts_seen)


def test_add_user_with_restricted_permissions(node_b: LocalNode, vhost_b: str) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"
    node_b.add_user(user, "s3cret/:@", vhost_b, configure="^$", write=".*", read=".*")
    try:
        amqp.declare_queue(node_b.uri(vhost_b), "q")  # as guest
        uri = node_b.uri(vhost_b, user=user, password="s3cret/:@")
        amqp.publish_messages(uri, "", "q", [amqp.Message(b"from-user")])
        assert [d.body for d in amqp.drain_queue(uri, "q", expected=1)] == [b"from-user"]
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
            amqp.declare_queue(uri, "not-allowed")
        assert excinfo.value.reply_code == 403
    finally:
        node_b.ctl("delete_user", user)


def test_memory_alarm_blocks_publishing_connection(node_b: LocalNode, vhost_b: str) -> None:
    uri = node_b.uri(vhost_b)
    amqp.declare_queue(uri, "q", durable=False)
    events: list[str] = []
    connection = pika.BlockingConnection(pika.URLParameters(uri))
    connection.add_on_connection_blocked_callback(lambda _c, _m: events.append("blocked"))
    connection.add_on_connection_unblocked_callback(lambda _c, _m: events.append("unblocked"))
    channel = connection.channel()
    alarm_set = False

    def pump_until(event: str) -> bool:
        deadline = time.monotonic() + 15
        while event not in events and time.monotonic() < deadline:
            connection.process_data_events(time_limit=0.1)
        return event in events

    try:
        channel.basic_publish("", "q", b"before")
        node_b.set_vm_memory_high_watermark(0)
        alarm_set = True
        channel.basic_publish("", "q", b"during")
        assert pump_until("blocked"), events
        assert events == ["blocked"]

        node_b.set_vm_memory_high_watermark(0.4)
        alarm_set = False
        assert pump_until("unblocked"), events
        assert events == ["blocked", "unblocked"]
    finally:
        if alarm_set:
            node_b.set_vm_memory_high_watermark(0.4)
        connection.close()
    assert [d.body for d in amqp.drain_queue(uri, "q", expected=2)] == [b"before", b"during"]


def test_management_api_answers_on_node_a(node_a: LocalNode, vhost_a: str) -> None:
    overview = node_a.management_request("GET", "/api/overview")
    assert overview["node"] == node_a.nodename
    assert overview["rabbitmq_version"]
    vhost = urllib.parse.quote(vhost_a, safe="")
    node_a.management_request("PUT", f"/api/queues/{vhost}/via-http", {"durable": True})
    queue = node_a.management_request("GET", f"/api/queues/{vhost}/via-http")
    assert queue["name"] == "via-http" and queue["durable"] is True
    with pytest.raises(ManagementHTTPError) as excinfo:
        node_a.management_request("GET", f"/api/queues/{vhost}/no-such-queue")
    assert excinfo.value.status == 404
    plugins = node_a.ctl("-q", "eval", "[A || {A, _, _} <- application:which_applications()].")
    assert "rabbitmq_shovel" in plugins


def test_management_request_needs_the_plugin(node_b: LocalNode) -> None:
    with pytest.raises(LocalNodeError, match="without rabbitmq_management"):
        node_b.management_request("GET", "/api/overview")


def test_ctl_failure_raises_with_stderr(node_b: LocalNode) -> None:
    with pytest.raises(LocalNodeError, match="does not exist"):
        node_b.ctl("delete_vhost", f"no-such-vhost-{uuid.uuid4().hex[:6]}")


def test_context_manager_starts_and_cleans_up() -> None:
    with LocalNode() as node:
        assert node.answers()
        pgid = node.pid
        base_dir = node.base_dir
        with amqp.blocking_connection(node.uri()) as connection:
            assert connection.is_open
    assert not node.is_running()
    assert not broker_answers("127.0.0.1", node.amqp_port, timeout=0.5)
    assert node_processes(node, pgid) == []
    assert not base_dir.exists()
    with pytest.raises(LocalNodeError, match="closed"):
        node.start()



def test_a_node_that_cannot_recover_its_data_is_started_empty_when_asked() -> None:
    node = LocalNode(name=f"pumpd-unrecoverable-{uuid.uuid4().hex[:6]}")
    try:
        node.start()
        assert node.run_ctl(["eval", "application:get_env(rabbit, classic_queue_default_version)."],
                            timeout=30).stdout.strip() == "{ok,2}"
        node.kill()
        for table in (node.files.mnesia_base / node.nodename).glob("*.DAT"):
            table.write_bytes(b"not a table" * 64)  # what no broker recovers from
        with pytest.raises(LocalNodeError):
            node.ensure_running()
        node.ensure_running(fresh_on_failure=True)
        assert node.answers()
        assert (node.files.base_dir / "mnesia.broken-0").is_dir()  # kept for a look
    finally:
        node.close(graceful=False)
