"""The pumpd command against private nodes: the verbose example runs, and SIGTERM drains and
exits 0."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pika
import pytest
from pumpd.config.parse import parse_config
from pumpd.engine.status import State
from pumpd.importers.erlang import import_erlang_config
from pumpd.testing.localnode import LocalNode

from tests.support import amqp_helpers as amqp
from tests.support.harness import running

DATA = Path(__file__).resolve().parents[1] / "data"


def write(tmp_path: Path, doc: object, name: str = "c.json") -> Path:
    p = tmp_path / name
    p.write_bytes(orjson.dumps(doc))
    return p


def test_seed_verbose_example_runs_pointed_at_local_nodes(
    node_a: LocalNode, node_b: LocalNode, vhost_a: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The seed's example, imported as is; only its brokers are pointed at local nodes: the
    sources at node_a (users fred and john in vhost my_vhost), the host-less destination
    ("the local broker") at node_b through PUMPD_LOCAL_BROKER."""
    doc = import_erlang_config((DATA / "seed_example.config").read_text(), source="seed")
    for user in ("fred", "john"):
        node_a.add_user(user, "secret", vhost_a)
    shovel = doc["shovels"]["my_first_shovel"]
    shovel["sources"]["brokers"] = [
        node_a.uri(vhost_a, "fred", "secret"), node_a.uri(vhost_a, "john", "secret")]
    assert shovel["destinations"]["broker"] == "amqp://"
    monkeypatch.setenv("PUMPD_LOCAL_BROKER", f"127.0.0.1:{node_b.amqp_port}")
    cfg = parse_config(doc).shovels["my_first_shovel"]
    src = node_a.uri(vhost_a)
    with amqp.blocking_connection(src) as c:  # the seed binds its queue to my_direct on the source
        c.channel().exchange_declare("my_direct", "direct", durable=True)
    with amqp.blocking_connection(node_b.uri("/")) as c:
        ch = c.channel()
        ch.exchange_declare("my_direct", "direct", durable=True)
        ch.queue_declare("seed-landed", durable=False, auto_delete=False)
        ch.queue_bind("seed-landed", "my_direct", "from_shovel")
    try:
        with running(cfg) as pumps:
            pumps.wait_for(lambda: pumps.status("my_first_shovel").state == State.RUNNING, 30, "running")
            amqp.publish_messages(src, "my_direct", "", [amqp.Message(b"seed %d" % i) for i in range(25)])
            pumps.wait_for(lambda: amqp.queue_depth(node_b.uri("/"), "seed-landed")[0] == 25, 30, "25 landed")
        got = amqp.drain_queue(node_b.uri("/"), "seed-landed", expected=25, timeout=10)
        assert [d.body for d in got] == [b"seed %d" % i for i in range(25)]
        assert {d.properties.delivery_mode for d in got} == {2}
        assert {d.method.routing_key for d in got} == {"from_shovel"}
    finally:
        with amqp.blocking_connection(node_b.uri("/")) as c:
            c.channel().queue_delete("seed-landed")


def test_sigterm_drains_and_exits_0(node_a: LocalNode, node_b: LocalNode, vhost_a: str,
                                    vhost_b: str, tmp_path: Path) -> None:
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    amqp.declare_queue(src, "q", durable=True)
    amqp.declare_queue(dst, "out", durable=True)
    n = 60_000
    amqp.publish_messages(src, "", "q", [amqp.Message(b"%d" % i, pika.BasicProperties(delivery_mode=2)) for i in range(n)])
    cfg = {"shovels": {"s": {"sources": {"broker": src}, "destinations": {"broker": dst}, "queue": "q",
                             "publish_fields": {"exchange": "", "routing_key": "out"}}}}
    proc = subprocess.Popen([sys.executable, "-m", "pumpd", "--config", str(write(tmp_path, cfg)),
                             "--http", "off"], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while amqp.queue_depth(dst, "out")[0] < 5000 and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "terminated (shutdown)" in err
    left, consumers = amqp.queue_depth(src, "q")
    arrived = amqp.queue_depth(dst, "out")[0]
    assert consumers == 0
    assert left + arrived == n, "each message is either still at the source or at the destination"
    assert 5000 <= arrived < n
    with amqp.blocking_connection(src) as c:  # nothing left unacknowledged: all of the rest is ready
        assert c.channel().queue_declare("q", passive=True).method.message_count == left

