"""Run-time cases the Shovel plugin's own suites cover (deps/rabbitmq_shovel/test/
amqp091_dynamic_SUITE, amqp091_static_SUITE), against private nodes: quorum queues and streams,
a stream consumed from an offset, predeclared queues that are missing, a missing destination
exchange, the source queue deleted while running, bad credentials, delete-after edge cases,
the consumer's arguments and tag."""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pika
import pika.exceptions
import pytest
from pumpd.config.parse import parse_config
from pumpd.engine.status import State
from pumpd.importers.erlang.shovels import import_erlang_config
from pumpd.testing.localnode import LocalNode

from tests.support import amqp_helpers as amqp
from tests.support.daemon_helpers import fill_queue, shovel_def
from tests.support.harness import RunningPumps, running, shovel

QUORUM = {"x-queue-type": "quorum"}


STREAM = {"x-queue-type": "stream"}


def bodies(n: int, start: int = 0) -> list[bytes]:
    return [b"m%d" % i for i in range(start, start + n)]


def queue_exists(uri: str, queue: str) -> bool:
    try:
        amqp.queue_depth(uri, queue)
    except pika.exceptions.ChannelClosedByBroker as exc:
        assert exc.reply_code == 404
        return False
    return True


def reason_has(pumps: RunningPumps, text: str) -> bool:
    return any(text in (reason or "") for _, reason in pumps.history[next(iter(pumps.history))])


def read_stream(uri: str, queue: str, expected: int) -> list[bytes]:
    """A stream is read by a consumer with a prefetch, from an offset: here the first."""
    out: list[bytes] = []
    with amqp.blocking_connection(uri) as connection:
        channel = connection.channel()
        channel.basic_qos(prefetch_count=100)
        for method, _props, body in channel.consume(
                queue, arguments={"x-stream-offset": "first"}, inactivity_timeout=10):
            if method is None:
                break
            channel.basic_ack(method.delivery_tag)
            out.append(body)
            if len(out) == expected:
                break
        channel.cancel()
    return out


CURRENT_STATIC = """[{rabbitmq_shovel, [{shovels, [
  {test_shovel, [
    {source, [{uris, ["%(uri)s?heartbeat=5"]},
              {declarations, [{'queue.declare', [exclusive, auto_delete]},
                              {'exchange.declare', [{exchange, <<"test_exchange">>}, auto_delete]},
                              {'queue.bind', [{queue, <<>>}, {exchange, <<"test_exchange">>},
                                              {routing_key, <<"to_the_shovel">>}]}]},
              {queue, <<>>}]},
    {destination, [{uris, ["%(uri)s"]},
                   {publish_fields, [{exchange, <<"test_exchange">>},
                                     {routing_key, <<"from_the_shovel">>}]},
                   {publish_properties, [{delivery_mode, 2}, {content_type, <<"shovelled">>}]},
                   {add_forward_headers, true},
                   {add_timestamp_header, true}]}
    %(ack_mode)s]}]}]}]."""


@pytest.mark.parametrize("ack_mode", ["{ack_mode, on_confirm}", ""])
def test_current_static_format_imported_and_run(node_a: LocalNode, vhost_a: str,
                                                 ack_mode: str) -> None:
    uri = node_a.uri(vhost_a)
    text = CURRENT_STATIC % {"uri": uri, "ack_mode": f", {ack_mode}" if ack_mode else ""}
    warnings: list[str] = []
    doc = import_erlang_config(text, source="advanced.config", warnings=warnings)
    s = parse_config(doc).shovels["test_shovel"]
    # the current format's own default: no_ack, and the import says it loses messages
    assert s.ack_mode.value == ("on_confirm" if ack_mode else "no_ack")
    assert bool(warnings) == (not ack_mode)
    with amqp.blocking_connection(uri) as connection:
        ch = connection.channel()
        ch.exchange_declare("test_exchange", "direct", auto_delete=True)
        out = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_bind(out, "test_exchange", "from_the_shovel")
        with running(s) as pumps:
            pumps.wait_for(lambda: pumps.status().state == State.RUNNING, 30, "running")
            ch.basic_publish("test_exchange", "to_the_shovel", b"*",
                             pika.BasicProperties(content_type="unshovelled", delivery_mode=2))
            got = None
            for method, props, body in ch.consume(out, inactivity_timeout=10):
                assert method is not None, "nothing shovelled"
                got = (method.routing_key, props, body)
                ch.basic_ack(method.delivery_tag)
                break
            ch.cancel()
    assert got is not None
    key, props, body = got
    assert (key, body, props.content_type, props.delivery_mode) == (
        "from_the_shovel", b"*", "shovelled", 2)
    assert list(props.headers) == ["x-shovelled", "x-shovelled-timestamp"]


def test_quorum_to_quorum_moves_everything_then_delete_after(node_a: LocalNode,
                                                             vhost_a: str) -> None:
    uri = node_a.uri(vhost_a)
    amqp.declare_queue(uri, "qq-in", arguments=QUORUM)
    amqp.publish_messages(uri, "", "qq-in", [amqp.Message(b) for b in bodies(30)])
    s = shovel(**{"src-uri": uri, "src-queue": "qq-in", "dest-uri": uri, "dest-queue": "qq-out",
                  "dest-queue-args": QUORUM, "src-delete-after": 20})
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status().state == State.TERMINATED, 60, "terminated")
    assert "delete-after reached: 20 messages moved" in (pumps.status().reason or "")
    got = [d.body for d in amqp.drain_queue(uri, "qq-out", expected=20, timeout=10)]
    assert got == bodies(20)
    assert amqp.queue_depth(uri, "qq-in")[0] == 10
    # the destination queue was created as the quorum queue its arguments ask for
    info = node_a.management_request(
        "GET", f"/api/queues/{urllib.parse.quote(vhost_a, safe='')}/qq-out")
    assert info["type"] == "quorum"


def test_into_a_stream_then_a_stream_consumed_from_an_offset(node_a: LocalNode,
                                                             vhost_a: str) -> None:
    uri = node_a.uri(vhost_a)
    amqp.declare_queue(uri, "in")
    amqp.publish_messages(uri, "", "in", [amqp.Message(b) for b in bodies(10)])
    into_stream = shovel("into", **{"src-uri": uri, "src-queue": "in", "dest-uri": uri,
                                    "dest-queue": "events", "dest-queue-args": STREAM,
                                    "src-delete-after": "queue-length"})
    with running(into_stream) as pumps:
        pumps.wait_for(lambda: pumps.status().state == State.TERMINATED, 60, "terminated")
    assert read_stream(uri, "events", 10) == bodies(10)
    # A stream is never emptied by reading it: a shovel from offset 4 sees messages 4..9, and
    # delete-after counts what it moved from there.
    from_offset = shovel("replay", **{
        "src-uri": uri, "src-queue": "events", "src-predeclared": True,
        "src-consumer-args": {"x-stream-offset": 4}, "src-prefetch-count": 50,
        "src-delete-after": 5, "dest-uri": uri, "dest-queue": "replayed"})
    with running(from_offset) as pumps:
        pumps.wait_for(lambda: pumps.status("replay").state == State.TERMINATED, 60, "terminated")
    assert "delete-after reached: 5 messages moved" in (pumps.status("replay").reason or "")
    assert [d.body for d in amqp.drain_queue(uri, "replayed")] == bodies(5, 4)
    assert read_stream(uri, "events", 10) == bodies(10)  # still all there


def test_static_source_without_declarations_waits_for_its_queue(node_a: LocalNode,
                                                                vhost_a: str) -> None:
    """amqp091_static_SUITE:valid_configuration_with_predefined_resources: no declarations, the
    queue missing; the shovel says so, creates nothing, and runs once the queue exists."""
    uri = node_a.uri(vhost_a)
    s = shovel(sources={"broker": uri}, destinations={"broker": uri}, queue="later",
               publish_fields={"exchange": "", "routing_key": "out"}, reconnect_delay=1)
    with running(s) as pumps:
        pumps.wait_for(lambda: reason_has(pumps, "no queue 'later'"), 30, "the reason")
        assert not queue_exists(uri, "later")
        amqp.declare_queue(uri, "later")
        amqp.declare_queue(uri, "out")
        pumps.wait_for(lambda: pumps.status().state == State.RUNNING, 30, "running")
        amqp.publish_messages(uri, "", "later", [amqp.Message(b) for b in bodies(3)])
        pumps.wait_for(lambda: amqp.queue_depth(uri, "out")[0] == 3, 30, "moved")


@pytest.mark.parametrize("side", ["src", "dest"])
def test_predeclared_queue_missing_then_created(node_a: LocalNode, vhost_a: str,
                                                side: str) -> None:
    uri = node_a.uri(vhost_a)
    if side == "dest":
        amqp.declare_queue(uri, "in")
    else:
        amqp.declare_queue(uri, "out")
    s = shovel(**{"src-uri": uri, "src-queue": "in", "dest-uri": uri, "dest-queue": "out",
                  f"{side}-predeclared": True, "reconnect-delay": 1})
    missing = "in" if side == "src" else "out"
    where = "source" if side == "src" else "destination"
    with running(s) as pumps:
        pumps.wait_for(lambda: reason_has(pumps, f"no queue '{missing}'"), 30, "the reason")
        reason = next(r for _, r in pumps.history["s"] if r and "no queue" in r)
        assert reason.startswith(f"{where}: ") and "404 NOT_FOUND" in reason
        assert not queue_exists(uri, missing)  # predeclared: nothing created behind the user
        amqp.declare_queue(uri, missing)
        amqp.publish_messages(uri, "", "in", [amqp.Message(b) for b in bodies(5)])
        pumps.wait_for(lambda: amqp.queue_depth(uri, "out")[0] == 5, 60, "moved once it exists")
        assert pumps.status().state == State.RUNNING


def test_missing_destination_exchange_then_declared(node_a: LocalNode, vhost_a: str) -> None:
    uri = node_a.uri(vhost_a)
    amqp.declare_queue(uri, "in")
    amqp.publish_messages(uri, "", "in", [amqp.Message(b) for b in bodies(5)])
    s = shovel(**{"src-uri": uri, "src-queue": "in", "dest-uri": uri, "dest-exchange": "nx",
                  "dest-exchange-key": "k", "reconnect-delay": 1})
    with running(s) as pumps:
        pumps.wait_for(lambda: reason_has(pumps, "no exchange 'nx'"), 30, "the reason")
        assert amqp.queue_depth(uri, "in")[0] == 5  # nothing acked while it cannot be delivered
        with amqp.blocking_connection(uri) as connection:
            ch = connection.channel()
            ch.exchange_declare("nx", "direct", durable=True)
            ch.queue_declare("out", durable=True)
            ch.queue_bind("out", "nx", "k")
        pumps.wait_for(lambda: amqp.queue_depth(uri, "out")[0] == 5, 60, "moved once it exists")
    assert sorted(d.body for d in amqp.drain_queue(uri, "out")) == bodies(5)


def test_source_queue_deleted_while_running(node_a: LocalNode, vhost_a: str) -> None:
    uri = node_a.uri(vhost_a)
    amqp.declare_queue(uri, "in")
    s = shovel(**{"src-uri": uri, "src-queue": "in", "dest-uri": uri, "dest-queue": "out",
                  "reconnect-delay": 1})
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status().state == State.RUNNING, 30, "running")
        with amqp.blocking_connection(uri) as connection:
            connection.channel().queue_delete("in")
        pumps.wait_for(lambda: reason_has(pumps, "cancelled the consumer"), 30, "the reason")
        # it restarts and declares the queue again (durable), then carries on
        pumps.wait_for(lambda: queue_exists(uri, "in") and amqp.queue_depth(uri, "in")[1] == 1, 30,
                       "re-declared and consumed")
        amqp.publish_messages(uri, "", "in", [amqp.Message(b) for b in bodies(5)])
        pumps.wait_for(lambda: amqp.queue_depth(uri, "out")[0] == 5, 60, "moved")


def test_bad_password_names_user_and_vhost(node_a: LocalNode, vhost_a: str) -> None:
    good = node_a.uri(vhost_a)
    bad = node_a.uri(vhost_a, password="wrong")
    s = shovel(**{"src-uri": bad, "src-queue": "in", "dest-uri": good, "dest-queue": "out",
                  "reconnect-delay": 0})
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status().state == State.TERMINATED, 30, "terminated")
    reason = pumps.status().reason or ""
    assert reason.startswith("source: ") and "user 'guest'" in reason
    assert f"vhost {vhost_a!r}" in reason and "wrong" not in reason.replace("wrong username", "")


def test_no_access_to_vhost_names_user_and_vhost(node_a: LocalNode, vhost_a: str) -> None:
    user = f"noaccess-{vhost_a[-8:]}"
    node_a.ctl("add_user", user, "pw")
    try:
        bad = node_a.uri(vhost_a, user=user, password="pw")
        s = shovel(**{"src-uri": node_a.uri(vhost_a), "src-queue": "in", "dest-uri": bad,
                      "dest-queue": "out", "reconnect-delay": 1})
        with running(s) as pumps:
            pumps.wait_for(lambda: reason_has(pumps, f"for user {user!r}"), 30, "the reason")
        reason = next(r for _, r in pumps.history["s"] if r and user in r)
        assert reason.startswith("destination: ") and f"vhost {vhost_a!r}" in reason
    finally:
        node_a.ctl("delete_user", user)


@contextmanager
def terminated_shovel(uri: str, messages: int, **source: Any) -> Iterator[RunningPumps]:
    """Shovel queue "in" (``messages`` published first) to "out" on ``uri``, with the source
    options ``source``; yields once the shovel has terminated, before the pumps stop."""
    amqp.declare_queue(uri, "in")
    if messages:
        amqp.publish_messages(uri, "", "in", [amqp.Message(b) for b in bodies(messages)])
    s = shovel(**{"src-uri": uri, "src-queue": "in", "dest-uri": uri, "dest-queue": "out",
                  **source})
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status().state == State.TERMINATED, 60, "terminated")
        yield pumps


@pytest.mark.parametrize("delete_after", [0, "queue-length"])
def test_delete_after_nothing_ends_at_once(node_a: LocalNode, vhost_a: str,
                                           delete_after: Any) -> None:
    with terminated_shovel(node_a.uri(vhost_a), 0, **{"src-delete-after": delete_after}) as pumps:
        pass
    assert "delete-after reached: 0 messages moved" in (pumps.status().reason or "")


def test_delete_after_duration_stops_the_shovel(node_a: LocalNode, vhost_a: str) -> None:
    uri = node_a.uri(vhost_a)
    with terminated_shovel(uri, 5, **{"src-delete-after-duration": 2}) as pumps:
        amqp.publish_messages(uri, "", "in", [amqp.Message(b"late")])
    reason = pumps.status().reason or ""
    assert "delete-after-duration reached: stopped after 2s, 5 messages moved" in reason
    assert amqp.queue_depth(uri, "out")[0] == 5 and amqp.queue_depth(uri, "in") == (1, 0)


def test_delete_after_duration_in_the_daemon_is_not_restarted(
    pumpd_daemon: Any, node_a: LocalNode, vhost_a: str,
) -> None:
    uri = node_a.uri(vhost_a)
    d = pumpd_daemon({"s": shovel_def(uri, "in", uri, "out", delete_after_duration=2)})
    d.wait_for(lambda: d.shovel("s")["state"] == "terminated", 60, "terminated")
    doc = d.shovel("s")
    assert doc["reason"].startswith("delete-after-duration reached: stopped after 2s")
    assert doc["workers"][0]["reason_code"] == "delete-after" and doc["restarts"] == 0
    assert d.stop() == 0


def test_consumer_tag_and_arguments_reach_the_broker(node_a: LocalNode, vhost_a: str) -> None:
    uri = node_a.uri(vhost_a)
    amqp.declare_queue(uri, "in")
    s = shovel(**{"src-uri": uri, "src-queue": "in", "dest-uri": uri, "dest-queue": "out",
                  "src-consumer-name": "pumpd-tag", "src-consumer-args": {"x-priority": 7}})
    vhost = urllib.parse.quote(vhost_a, safe="")
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status().state == State.RUNNING, 30, "running")

        def consumers() -> list[dict[str, Any]]:
            found: list[dict[str, Any]] = node_a.management_request("GET",
                                                                    f"/api/consumers/{vhost}")
            return found

        pumps.wait_for(lambda: bool(consumers()), 30, "the consumer in the management API")
        (consumer,) = consumers()
        assert consumer["consumer_tag"] == "pumpd-tag"
        assert consumer["arguments"] == {"x-priority": 7}
        amqp.publish_messages(uri, "", "in", [amqp.Message(b"m")])
        pumps.wait_for(lambda: amqp.queue_depth(uri, "out")[0] == 1, 30, "moved")


def disk_alarm(node: LocalNode, raised: bool) -> None:
    node.ctl("set_disk_free_limit", "100000GB" if raised else "50MB")


def has_disk_alarm(node: LocalNode) -> bool:
    return "disk" in node.ctl("eval", "rabbit_alarm:get_alarms().")


@pytest.mark.parametrize("ack_mode", ["on_confirm", "no_ack"])
def test_disk_alarm_before_start_then_the_plugin_status_figures(
    pumpd_daemon: Any, node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str,
    ack_mode: str,
) -> None:
    """The destination has a disk alarm before the shovel starts: it shows blocked, holds at
    most its prefetch (no_ack: cancels its consumer, where the plugin keeps consuming), shows
    the plugin's status figures and how many messages wait in the source queue, then moves
    everything in order once the alarm clears."""
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    sent = [b"d%04d" % i for i in range(300)]
    amqp.declare_queue(src, "in")
    fill_queue(src, "in", sent)
    disk_alarm(node_b, True)
    try:
        deadline = time.monotonic() + 60
        while not has_disk_alarm(node_b):
            assert time.monotonic() < deadline, "no disk alarm"
            time.sleep(0.2)
        d = pumpd_daemon({"s": shovel_def(src, "in", dst, "out", prefetch_count=50,
                                          ack_mode=ack_mode)})
        d.wait_for(lambda: d.shovel("s")["state"] == "blocked", 60, "blocked")
        if ack_mode == "on_confirm":
            d.wait_for(lambda: d.shovel("s")["source_backlog"] == 250, 60,
                       "the backlog read: 300 less the 50 held")
            doc = d.shovel("s")
            assert doc["counters"]["consumed"] - doc["counters"]["acked"] == 50  # the prefetch
        doc = d.shovel("s")
        assert doc["pending"] == doc["counters"]["buffered"]
        assert doc["forwarded"] == doc["counters"]["published"]
        assert (doc["remaining"], doc["remaining_unacked"]) == ("unlimited", "unlimited")
    finally:
        disk_alarm(node_b, False)
    d.wait_for(lambda: d.shovel("s")["counters"]["published"] == 300, 120, "all 300 published")
    d.wait_for(lambda: d.shovel("s")["source_backlog"] == 0, 60, "the backlog read empty")
    got = amqp.drain_queue(dst, "out", expected=300, timeout=30)
    assert [m.body for m in got] == sent
    assert d.stop() == 0


def test_remaining_counts_down_to_delete_after(node_a: LocalNode, vhost_a: str) -> None:
    with terminated_shovel(node_a.uri(vhost_a), 30, **{"src-delete-after": 20}) as pumps:
        pass
    c = pumps.status().counters
    assert (c.remaining, c.remaining_unacked, c.acked) == (0, 0, 20)


@pytest.fixture(scope="module")
def tls_certs(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tests.support.tls_helpers import make_certs

    return make_certs(tmp_path_factory.mktemp("parity-certs"))


@pytest.fixture(scope="module")
def tls_ext_node(tls_certs: Any) -> Any:
    """TLS with client certificates optional, and EXTERNAL offered (the plugin that does it
    ships with RabbitMQ; the mechanism list is read for each new connection)."""
    from tests.support.tls_helpers import server_listener

    tls = server_listener(tls_certs, require_client_cert=False)
    with LocalNode(plugins=("rabbitmq_auth_mechanism_ssl",), tls=tls) as node:
        node.ctl("eval", "application:set_env(rabbit, auth_mechanisms, "
                         "['PLAIN', 'AMQPLAIN', 'EXTERNAL']).")
        node.add_user("CN=client", "unused-password")
        yield node


def test_tls_server_only_private_ca_and_external_login(tls_ext_node: LocalNode,
                                                       tls_certs: Any) -> None:
    """Only cacertfile + verify_peer (no client certificate), as the plugin's documentation
    shows for a server-only private CA; and auth_mechanism=external, logged in as the client
    certificate's subject, with no password in the URI."""
    node = tls_ext_node
    plain = node.uri("/")
    amqp.declare_queue(plain, "tls-sub-in")
    amqp.publish_messages(plain, "", "tls-sub-in", [amqp.Message(b) for b in bodies(10)])
    ca = urllib.parse.quote(str(tls_certs / "ca.pem"), safe="/")
    server_only = f"amqps://guest:guest@127.0.0.1:{node.tls_port}/%2F?cacertfile={ca}" \
                  "&verify=verify_peer"
    external = (f"amqps://127.0.0.1:{node.tls_port}/%2F?cacertfile={ca}"
                f"&certfile={urllib.parse.quote(str(tls_certs / 'client.pem'), safe='/')}"
                f"&keyfile={urllib.parse.quote(str(tls_certs / 'client.key'), safe='/')}"
                "&auth_mechanism=external")
    s = shovel(**{"src-uri": server_only, "src-queue": "tls-sub-in", "dest-uri": external,
                  "dest-queue": "tls-sub-out"})
    with running(s) as pumps:
        pumps.wait_for(lambda: pumps.status().counters.acked == 10, 60, "10 over TLS")
        listed = node.ctl("list_connections", "-q", "--no-table-headers", "user", "ssl",
                          "auth_mechanism")
    users = sorted(line.split()[0] for line in listed.splitlines() if "true" in line)
    assert users == ["CN=client", "guest"], listed
    assert "EXTERNAL" in listed
    got = amqp.drain_queue(plain, "tls-sub-out", expected=10, timeout=10)
    assert [d.body for d in got] == bodies(10)

