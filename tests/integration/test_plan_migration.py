"""``pumpd plan-migration``: a vhost's queues read from the management API of a real
node, the plan checked and run by the daemon, every queue recreated alike and every message
moved; its errors; and the migration's progress in ``pumpd status``.

The source is ``node_a`` (the session's node with the management plugin, shared by every test
here); a second vhost on it is the destination where the queues are compared through the API."""

from __future__ import annotations

import http.server
import json
import re
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pumpd import exitcodes
from pumpd.testing.localnode import LocalNode, find_free_port

from tests.support.amqp_helpers import blocking_connection
from tests.support.daemon_helpers import fill_queue


def pumpd(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pumpd", *args], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def plan(node: LocalNode, source: str, destination: str, *args: str,
         out: Path | None = None) -> subprocess.CompletedProcess[str]:
    extra = ("-o", str(out)) if out is not None else ()
    return pumpd("plan-migration", "--source", source, "--destination", destination,
                 "--management-port", str(node.management_port), "--management-insecure-http",
                 *args, *extra)


@pytest.fixture
def dest_vhost(node_a: LocalNode) -> Iterator[str]:
    """A second fresh vhost on node_a, the destination (guest has full permissions)."""
    name = f"t-dest-{uuid.uuid4().hex[:8]}"
    node_a.add_vhost(name)
    yield name
    node_a.ensure_running()
    node_a.delete_vhost(name)


def queues_of(node: LocalNode, vhost: str) -> dict[str, dict[str, Any]]:
    listed = node.management_request("GET", f"/api/queues/{urllib.parse.quote(vhost, safe='')}")
    return {q["name"]: q for q in listed}


def message_counts(node: LocalNode, vhost: str) -> dict[str, int]:
    """Messages in each queue, from the queues themselves (the management API's figures lag)."""
    out = node.ctl("list_queues", "-q", "--no-table-headers", "-p", vhost, "name", "messages")
    return {name: int(n) for name, n in (line.split("\t") for line in out.splitlines() if line)}


def wait_counts(node: LocalNode, vhost: str, expected: dict[str, int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        counts = message_counts(node, vhost)
        got = {q: counts.get(q) for q in expected}
        if got == expected:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"in vhost {vhost!r}: {got}, expected {expected}")
        time.sleep(0.2)


# The source vhost: one queue of each kind the plan must recreate, with its messages.
QUEUES: dict[str, tuple[bool, dict[str, Any], int]] = {  # name: (durable, arguments, messages)
    "orders": (True, {}, 300),
    "quorum.q": (True, {"x-queue-type": "quorum"}, 200),
    "lazy.q": (True, {"x-queue-mode": "lazy"}, 150),
    "ttl.q": (True, {"x-message-ttl": 3_600_000, "x-dead-letter-exchange": "dlx"}, 120),
    "limited.q": (True, {"x-max-length": 50, "x-overflow": "reject-publish"}, 50),
    "transient.q": (False, {}, 100),
    "events": (True, {"x-queue-type": "stream"}, 40),
}


def test_the_plan_recreates_every_queue_alike_and_the_daemon_moves_every_message(
    pumpd_daemon, node_a: LocalNode, vhost_a: str, dest_vhost: str, tmp_path: Path
) -> None:
    src, dst = node_a.uri(vhost_a), node_a.uri(dest_vhost)
    with blocking_connection(src) as owner:
        ch = owner.channel()
        for name, (durable, arguments, _) in QUEUES.items():
            ch.queue_declare(name, durable=durable, arguments=arguments)
        ch.queue_declare("private", exclusive=True)  # held by this connection: skipped
        server_named = ch.queue_declare("", durable=False).method.queue  # skipped
        # the length limit refuses what is over it: published 80, kept 50
        fill_queue(src, "limited.q", [b"l%03d" % i for i in range(80)])
        for name, (_, _, count) in QUEUES.items():
            if name != "limited.q":
                fill_queue(src, name, [b"%s-%04d" % (name.encode(), i) for i in range(count)])
        expected = {name: count for name, (_, _, count) in QUEUES.items()}
        wait_counts(node_a, vhost_a, expected, 30)

        out = tmp_path / "plan.json"
        result = plan(node_a, src, dst, out=out)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""  # the plan went to the file
    assert out.stat().st_mode & 0o777 == 0o600  # it holds the passwords
    assert "7 shovels planned, 2 skipped (1 exclusive, 1 server-named)" in result.stderr
    assert re.search(r"skipped queue 'private': it is exclusive", result.stderr)
    assert f"skipped queue {server_named!r}: it is server-named" in result.stderr
    assert "queue 'events' is a stream" in result.stderr

    text = out.read_text()
    document = json.loads(text)
    assert text.startswith('{\n  "shovels"')  # indent 2, no shovels_per_process for 7
    assert list(document["shovels"]) == sorted(QUEUES)  # stable order, named after the queues
    orders = document["shovels"]["orders"]
    assert orders == {
        "sources": {"broker": src},
        "destinations": {"broker": dst, "declarations": [
            {"queue.declare": {"queue": "orders", "durable": True}}]},
        "queue": "orders",
        "prefetch_count": 1000,
        "ack_mode": "on_confirm",
        "publish_fields": {"exchange": "", "routing_key": "orders"},
    }
    assert document["shovels"]["events"]["consumer_args"] == {"x-stream-offset": "first"}

    check = pumpd("check", "--config", str(out))
    assert check.returncode == 0, check.stderr
    assert "events: queue events on" in check.stdout

    d = pumpd_daemon(document["shovels"])
    wait_counts(node_a, dest_vhost, expected, 90)
    # Every source queue emptied (a stream keeps what is read), nothing left unacknowledged.
    d.wait_for(lambda: all(d.shovel(n)["counters"]["acked"] == c for n, c in expected.items()),
               60, "every message acknowledged on the source")
    assert d.stop() == 0
    left = message_counts(node_a, vhost_a)
    assert {n: left[n] for n in QUEUES} == {n: (40 if n == "events" else 0) for n in QUEUES}

    before, after = queues_of(node_a, vhost_a), queues_of(node_a, dest_vhost)
    assert set(after) == set(QUEUES)  # the skipped ones were not created

    def shape(q: dict[str, Any]) -> tuple[Any, ...]:
        return q["type"], q["durable"], q["auto_delete"], q["exclusive"], q["arguments"]

    for name in QUEUES:
        assert shape(after[name]) == shape(before[name]), name
    assert after["quorum.q"]["type"] == "quorum" and after["events"]["type"] == "stream"
    assert after["transient.q"]["durable"] is False
    # every message, once: the bodies on the destination are the source's
    with blocking_connection(dst) as conn:
        ch = conn.channel()
        method, _, body = ch.basic_get("orders", auto_ack=True)
        assert method is not None and body == b"orders-0000"


def test_include_and_exclude_match_whole_queue_names(
    node_a: LocalNode, vhost_a: str, dest_vhost: str
) -> None:
    src, dst = node_a.uri(vhost_a), node_a.uri(dest_vhost)
    with blocking_connection(src) as conn:
        ch = conn.channel()
        for name in ("app.a", "app.b", "app.tmp", "xapp.c", "other"):
            ch.queue_declare(name, durable=True)
    result = plan(node_a, src, dst, "--include", r"app\..*", "--include", "other",
                  "--exclude", r".*\.tmp")
    assert result.returncode == 0, result.stderr
    assert list(json.loads(result.stdout)["shovels"]) == ["app.a", "app.b", "other"]
    assert "3 shovels planned, 0 skipped, 2 left out by --include/--exclude" in result.stderr
    # a partial match is no match
    result = plan(node_a, src, dst, "--include", "app")
    assert result.returncode == exitcodes.CONFIG_ERROR
    assert "nothing to plan in vhost" in result.stderr
    assert result.stdout == ""
    result = plan(node_a, src, dst, "--include", "app[")
    assert result.returncode == exitcodes.CONFIG_ERROR
    assert "not a regular expression: 'app['" in result.stderr


def test_errors_name_the_url_and_the_cause(node_a: LocalNode, vhost_a: str) -> None:
    port = node_a.management_port
    dst = node_a.uri("elsewhere")
    url = f"http://127.0.0.1:{port}/api/queues/{urllib.parse.quote(vhost_a, safe='')}"

    result = plan(node_a, node_a.uri(vhost_a, password="wrong"), dst)
    assert result.returncode == exitcodes.UNAVAILABLE
    assert f"{url}: HTTP 401" in result.stderr
    assert "refused the user 'guest'" in result.stderr and "password" in result.stderr
    assert "wrong" not in result.stderr  # no password in the message

    result = plan(node_a, node_a.uri("no-such-vhost"), dst)
    assert result.returncode == exitcodes.UNAVAILABLE
    assert f"http://127.0.0.1:{port}/api/queues/no-such-vhost: HTTP 404" in result.stderr
    assert "the source has no vhost 'no-such-vhost'" in result.stderr

    closed = find_free_port()
    result = pumpd("plan-migration", "--source", node_a.uri(vhost_a), "--destination", dst,
                   "--management-port", str(closed), "--management-insecure-http")
    assert result.returncode == exitcodes.UNAVAILABLE
    assert f"http://127.0.0.1:{closed}/api/queues/" in result.stderr
    assert "connection refused" in result.stderr
    assert "management plugin" in result.stderr

    result = plan(node_a, node_a.uri(vhost_a), node_a.uri(vhost_a))
    assert result.returncode == exitcodes.CONFIG_ERROR
    assert "the source and the destination are the same vhost" in result.stderr

    # a trailing '/' is the empty vhost: listing it would list every vhost's queues
    result = plan(node_a, f"amqp://guest:guest@127.0.0.1:{node_a.amqp_port}/", dst)
    assert result.returncode == exitcodes.CONFIG_ERROR
    assert "names the empty vhost" in result.stderr and "%2F" in result.stderr


def test_an_answer_that_is_not_the_management_api_is_refused(node_a: LocalNode) -> None:
    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<html>a login page</html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}/mgmt"
        result = pumpd("plan-migration", "--source", node_a.uri("v"), "--destination",
                       node_a.uri("w"), "--management-url", base, "--management-insecure-http")
    finally:
        server.shutdown()
        server.server_close()
    assert result.returncode == exitcodes.UNAVAILABLE
    assert f"{base}/api/queues/v: the answer is not JSON" in result.stderr


def test_help_explains_the_command() -> None:
    result = pumpd("plan-migration", "--help")
    assert result.returncode == 0
    for words in ("--include", "--exclude", "--management-port", "--management-url",
                  "--shovels-per-process", "exclusive", "server-named", "x-stream-offset",
                  "pumpd check"):
        assert words in result.stdout
    assert "plan-migration" in pumpd("--help").stdout


def test_status_shows_the_migration_progress(
    pumpd_daemon, node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str,
    tmp_path: Path
) -> None:
    """A blocked destination holds the backlog still, then it falls to 0: the summary line and
    the --json summary follow it."""
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    with blocking_connection(src) as conn:
        ch = conn.channel()
        ch.queue_declare("work", durable=True)
        ch.queue_declare("not-this-one", durable=True)
    fill_queue(src, "work", [b"w%05d" % i for i in range(2000)])
    result = plan(node_a, src, dst, "--include", "work")
    assert result.returncode == 0, result.stderr
    shovels = json.loads(result.stdout)["shovels"]
    assert list(shovels) == ["work"]
    shovels["work"]["prefetch_count"] = 100  # as a user may edit it

    def status(*args: str) -> subprocess.CompletedProcess[str]:
        return pumpd("status", "--http", f"127.0.0.1:{d.port}", *args)

    def summary() -> dict[str, Any]:
        done = status("--json")
        assert done.returncode == 0, done.stderr
        doc: dict[str, Any] = json.loads(done.stdout)["summary"]
        return doc

    node_b.set_vm_memory_high_watermark(0)
    try:
        d = pumpd_daemon(shovels)
        # 100 delivered to the shovel and held, 1,900 wait in the queue; once the first
        # publishes have left the rate's window, nothing moves
        blocked_line = ("1 shovel: 1 blocked; 1,900 messages left in the source queues, "
                        "0 msg/s, time to empty unknown (nothing is moving)")

        def held_still() -> list[str] | None:
            if summary() != {"shovels": 1, "states": {"blocked": 1}, "source_backlog": 1900,
                             "source_backlog_known": 1, "msg_per_s": 0.0,
                             "seconds_to_empty": None}:
                return None
            lines = status().stdout.splitlines()
            return lines if lines[0] == blocked_line else None

        text = d.wait_for(held_still, 60, "the backlog held still while blocked")
        assert text[1] == "" and text[2].startswith("NAME")
    finally:
        node_b.set_vm_memory_high_watermark(0.4)
    seen: list[int] = []

    def emptied() -> bool:
        s = summary()
        seen.append(s["source_backlog"])
        return s["seconds_to_empty"] == 0.0 and s["states"] == {"running": 1}

    d.wait_for(emptied, 60, "the source queue emptied")
    assert seen == sorted(seen, reverse=True) and seen[-1] == 0  # it only fell
    assert status().stdout.splitlines()[0].startswith(
        "1 shovel: 1 running; 0 messages left in the source queues, ")
    assert status().stdout.splitlines()[0].endswith("the source queues are empty")
    d.wait_for(lambda: d.shovel("work")["counters"]["acked"] == 2000, 30, "all acked")
    assert d.stop() == 0
    with blocking_connection(dst) as conn:
        assert conn.channel().queue_declare("work", passive=True).method.message_count == 2000


class _Api:
    """A local stand-in for the management API: answers every GET with ``reply(handler)`` and
    remembers each request's path and Authorization header."""

    def __init__(self, reply: Any) -> None:
        self.seen: list[tuple[str, str | None]] = []
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                api.seen.append((self.path, self.headers.get("Authorization")))
                reply(self)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _json_reply(doc: Any) -> Any:
    def reply(h: http.server.BaseHTTPRequestHandler) -> None:
        body = json.dumps(doc).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)
    return reply


SRC = "amqp://admin:s3cret@127.0.0.1:5672/v"


DST = "amqp://admin:s3cret@127.0.0.1:5673/w"


def _plan_from(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return pumpd("plan-migration", "--source", SRC, "--destination", DST, "--management-url",
                 url, *args)


def test_basic_auth_goes_over_plain_http_only_when_the_user_says_so(tmp_path: Path) -> None:
    api = _Api(_json_reply([{"name": "orders", "vhost": "v", "durable": True}]))
    try:
        refused = _plan_from(api.url)
        assert refused.returncode == exitcodes.UNAVAILABLE
        assert refused.stderr.count("\n") == 1
        assert "refusing to send the source's user and password over plain http" in refused.stderr
        assert "--management-insecure-http" in refused.stderr
        assert api.seen == []  # nothing was sent at all
        # the default for an amqp:// source is http on 15672: refused the same way
        default = pumpd("plan-migration", "--source", SRC, "--destination", DST)
        assert default.returncode == exitcodes.UNAVAILABLE
        assert "http://127.0.0.1:15672/api/queues/v: refusing" in default.stderr
        allowed = _plan_from(api.url, "--management-insecure-http")
        assert allowed.returncode == exitcodes.OK, allowed.stderr
        assert json.loads(allowed.stdout)["shovels"]["orders"]["queue"] == "orders"
        assert len(api.seen) == 1 and api.seen[0][1] is not None
    finally:
        api.close()


def test_a_redirect_to_another_host_or_port_is_not_followed_with_the_password() -> None:
    elsewhere = _Api(_json_reply([]))

    def redirect(h: http.server.BaseHTTPRequestHandler) -> None:
        h.send_response(302)
        h.send_header("Location", f"{elsewhere.url}{h.path}")  # another port: another server
        h.send_header("Content-Length", "0")
        h.end_headers()

    api = _Api(redirect)
    try:
        result = _plan_from(api.url, "--management-insecure-http")
        assert result.returncode == exitcodes.UNAVAILABLE
        assert f"HTTP 302: redirected to {elsewhere.url}; not followed" in result.stderr
        assert result.stderr.count("\n") == 1 and "s3cret" not in result.stderr
        assert elsewhere.seen == []  # the other server never saw a request, let alone the password
    finally:
        api.close()
        elsewhere.close()


def test_a_redirect_within_the_same_server_is_followed() -> None:
    def reply(h: http.server.BaseHTTPRequestHandler) -> None:
        if h.path.startswith("/old/"):
            h.send_response(301)
            h.send_header("Location", "/new" + h.path[len("/old"):])
            h.send_header("Content-Length", "0")
            h.end_headers()
        else:
            _json_reply([{"name": "orders", "vhost": "v"}])(h)

    api = _Api(reply)
    try:
        result = _plan_from(api.url + "/old", "--management-insecure-http")
        assert result.returncode == exitcodes.OK, result.stderr
        assert [path for path, _ in api.seen] == ["/old/api/queues/v", "/new/api/queues/v"]
        assert api.seen[1][1] == api.seen[0][1]  # still authenticated: the same server
    finally:
        api.close()


def test_the_answer_is_read_up_to_its_bound() -> None:
    from pumpd.importers.management_api import MAX_RESPONSE_BYTES

    def endless(h: http.server.BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.end_headers()  # no length: read until the server closes, which it never would
        chunk = b" " * (1024 * 1024)
        try:
            for _ in range(MAX_RESPONSE_BYTES // len(chunk) + 8):
                h.wfile.write(chunk)
        except OSError:
            pass  # the client stopped reading

    api = _Api(endless)
    try:
        result = _plan_from(api.url, "--management-insecure-http")
        assert result.returncode == exitcodes.UNAVAILABLE
        assert f"the answer is larger than {MAX_RESPONSE_BYTES} bytes" in result.stderr
    finally:
        api.close()


def test_the_plan_file_is_0600_and_never_written_through_a_link(tmp_path: Path) -> None:
    api = _Api(_json_reply([{"name": "orders", "vhost": "v"}]))
    try:
        existing = tmp_path / "plan.json"
        existing.write_text("old")
        existing.chmod(0o644)
        result = _plan_from(api.url, "--management-insecure-http", "-o", str(existing))
        assert result.returncode == exitcodes.OK, result.stderr
        assert existing.stat().st_mode & 0o777 == 0o600  # not the old file's 0644
        assert "s3cret" in existing.read_text()

        target = tmp_path / "elsewhere.json"
        target.write_text("precious")
        link = tmp_path / "link.json"
        link.symlink_to(target)
        result = _plan_from(api.url, "--management-insecure-http", "-o", str(link))
        assert result.returncode == exitcodes.CONFIG_ERROR
        assert f"pumpd: plan-migration: {link}: is a symbolic link" in result.stderr
        assert target.read_text() == "precious" and link.is_symlink()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere.json", "link.json",
                                                               "plan.json"]  # no temp file left
        result = _plan_from(api.url, "--management-insecure-http", "-o", str(tmp_path))
        assert result.returncode == exitcodes.CONFIG_ERROR
        assert "is not a regular file" in result.stderr
    finally:
        api.close()

