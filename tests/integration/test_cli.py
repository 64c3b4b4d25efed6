"""The pumpd command: bad input, the importers end to end, and SIGTERM draining."""

from __future__ import annotations

import json
import os
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
from pumpd.importers.erlang.shovels import import_erlang_config
from pumpd.testing.localnode import LocalNode

from tests.support import amqp_helpers as amqp
from tests.support.harness import running

DATA = Path(__file__).resolve().parents[1] / "data"


def pumpd(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pumpd", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)


def write(tmp_path: Path, doc: object, name: str = "c.json") -> Path:
    p = tmp_path / name
    p.write_bytes(orjson.dumps(doc))
    return p


@pytest.mark.parametrize("shovel, expected", [
    ({"sources": {"broker": "amqp://h"}, "destinations": {"broker": "amqp://h"}, "queue": "q",
      "prefetch_count": -1}, "shovel 's': clause 'prefetch_count'"),
    ({"sources": {"broker": "amqp://h"}, "destinations": {"broker": "amqp://h"}, "queue": "q",
      "ack_mode": "sometimes"}, "clause 'ack_mode'"),
    ({"sources": {"broker": "amqp://u:hunter2@h:notaport"}, "destinations": {"broker": "amqp://h"},
      "queue": "q"}, "shovel 's'"),
    ({"destinations": {"broker": "amqp://h"}, "queue": "q"}, "sources"),
    ({"sources": {"broker": "amqp://h"}, "destinations": {"broker": "amqp://h"}, "queue": "q",
      "prefetch": 5}, "prefetch"),
])
def test_bad_config_exits_2_naming_shovel_and_clause(tmp_path: Path, shovel: dict, expected: str) -> None:
    done = pumpd("--config", str(write(tmp_path, {"shovels": {"s": shovel}})))
    assert done.returncode == 2
    assert expected in done.stderr
    assert "hunter2" not in done.stderr
    assert "starting" not in done.stderr  # nothing started


def test_invalid_json_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"shovels": {\n  "s": {,}\n}}')
    done = pumpd("--config", str(bad))
    assert done.returncode == 2 and "line 2" in done.stderr
    done = pumpd("--config", str(tmp_path / "nope.json"))
    assert done.returncode == 2 and "nope.json" in done.stderr


def test_check_prints_what_a_config_means(tmp_path: Path) -> None:
    cfg = {"shovels": {"orders": {"sources": {"broker": "amqp://u:pw@src/v"},
                                  "destinations": {"broker": "amqp://dst"}, "queue": "q"}}}
    done = pumpd("check", "--config", str(write(tmp_path, cfg)))
    assert done.returncode == 0, done.stderr
    assert "orders: queue q on amqp://u@src:5672/v -> amqp://guest@dst:5672/%2F" in done.stdout
    assert "on_confirm" in done.stdout and "prefetch 1000" in done.stdout
    assert "note:" not in done.stdout


def test_check_points_out_a_uri_naming_the_empty_vhost(tmp_path: Path) -> None:
    cfg = {"shovels": {"s": {"sources": {"broker": "amqp://h/"},
                             "destinations": {"broker": "amqp://h/%2F"}, "queue": "q"}}}
    done = pumpd("check", "--config", str(write(tmp_path, cfg)))
    assert done.returncode == 0, done.stderr
    assert 'note: source amqp://guest@h:5672/: a URI whose path is only "/" names the empty vhost' \
        in done.stdout
    assert "note: destination" not in done.stdout


def test_import_erlang_prints_pumpd_json() -> None:
    done = pumpd("import-erlang", str(DATA / "plugin_docs_example.config"))
    assert done.returncode == 0, done.stderr
    doc = orjson.loads(done.stdout)
    assert parse_config(doc).shovels["my_first_shovel"].prefetch_count == 10


def test_import_erlang_error_has_a_position(tmp_path: Path) -> None:
    p = tmp_path / "broken.config"
    p.write_text("[{rabbitmq_shovel, [{shovels, [{s, [{queue, <<\"q\">>}\n  oops]}]}]}].")
    done = pumpd("import-erlang", str(p))
    assert done.returncode == 2 and "broken.config:2:" in done.stderr


def test_plugin_docs_verbose_example_runs_pointed_at_local_nodes(
    node_a: LocalNode, node_b: LocalNode, vhost_a: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plugin documentation's example, imported as is; only its brokers are pointed at local nodes: the
    sources at node_a (users fred and john in vhost my_vhost), the host-less destination
    ("the local broker") at node_b through PUMPD_LOCAL_BROKER."""
    doc = import_erlang_config((DATA / "plugin_docs_example.config").read_text(), source="the plugin documentation's example")
    for user in ("fred", "john"):
        node_a.add_user(user, "secret", vhost_a)
    shovel = doc["shovels"]["my_first_shovel"]
    shovel["sources"]["brokers"] = [
        node_a.uri(vhost_a, "fred", "secret"), node_a.uri(vhost_a, "john", "secret")]
    assert shovel["destinations"]["broker"] == "amqp://"
    monkeypatch.setenv("PUMPD_LOCAL_BROKER", f"127.0.0.1:{node_b.amqp_port}")
    cfg = parse_config(doc).shovels["my_first_shovel"]
    src = node_a.uri(vhost_a)
    with amqp.blocking_connection(src) as c:  # the example binds its queue to my_direct on the source
        c.channel().exchange_declare("my_direct", "direct", durable=True)
    with amqp.blocking_connection(node_b.uri("/")) as c:
        ch = c.channel()
        ch.exchange_declare("my_direct", "direct", durable=True)
        ch.queue_declare("example-landed", durable=False, auto_delete=False)
        ch.queue_bind("example-landed", "my_direct", "from_shovel")
    try:
        with running(cfg) as pumps:
            pumps.wait_for(lambda: pumps.status("my_first_shovel").state == State.RUNNING, 30, "running")
            amqp.publish_messages(src, "my_direct", "", [amqp.Message(b"example %d" % i) for i in range(25)])
            pumps.wait_for(lambda: amqp.queue_depth(node_b.uri("/"), "example-landed")[0] == 25, 30, "25 landed")
        got = amqp.drain_queue(node_b.uri("/"), "example-landed", expected=25, timeout=10)
        assert [d.body for d in got] == [b"example %d" % i for i in range(25)]
        assert {d.properties.delivery_mode for d in got} == {2}
        assert {d.method.routing_key for d in got} == {"from_shovel"}
    finally:
        with amqp.blocking_connection(node_b.uri("/")) as c:
            c.channel().queue_delete("example-landed")


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


@pytest.mark.parametrize("command", ["", "status", "pause", "resume", "delete-shovel", "check",
                                     "schema", "plan-migration", "import-erlang",
                                     "import-definitions"])
def test_no_help_text_is_mistaken_for_a_secret(command: str) -> None:
    """Everything pumpd prints goes through the redactor, which hides what looks like a URI's
    password: a help text must not look like one ("[https://]HOST:PORT" once printed as
    "HOST:***")."""
    args = [sys.executable, "-m", "pumpd", *([command] if command else []), "--help"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "usage: pumpd" in out.stdout
    assert "***" not in out.stdout, out.stdout


def test_version_prints_the_package_version_and_exits_0() -> None:
    from pumpd.version import __version__

    out = subprocess.run([sys.executable, "-m", "pumpd", "--version"], capture_output=True,
                         text=True, timeout=60)
    assert (out.returncode, out.stdout.strip()) == (0, f"pumpd {__version__}"), out.stderr


def test_schema_prints_the_spec_s_json_schema_which_accepts_the_shipped_example() -> None:
    import jsonschema
    from pumpd.config.spec import json_schema

    out = subprocess.run([sys.executable, "-m", "pumpd", "schema"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    printed = json.loads(out.stdout)
    assert printed == json_schema()
    example = json.loads((Path(__file__).resolve().parents[2] / "contrib" / "pumpd.json")
                         .read_text())
    jsonschema.validate(example, printed)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"shovels": {"s": {"queue": "q", "prefetch_count": -1}}}, printed)


def test_every_command_has_a_parser_for_the_reference() -> None:
    from pumpd.cli.dispatch import COMMANDS, command_parsers

    assert set(command_parsers()) == set(COMMANDS) | {"run"}
