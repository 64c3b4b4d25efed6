"""``pumpd plan-migration`` against local HTTP servers, with no broker: how queues share
processes, the help, basic auth over plain HTTP, redirects, the bound on an answer, and the
plan file's mode."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from pumpd import exitcodes
from pumpd.config.parse import parse_config
from pumpd.importers.plan_migration import plan_migration


def pumpd(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pumpd", *args], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def test_many_queues_share_processes_and_the_option_overrides() -> None:
    def queues(n: int) -> list[dict[str, Any]]:
        return [{"name": f"q{i:04d}", "durable": True, "type": "classic", "arguments": {}}
                for i in range(n)]

    uri = "amqp://guest:guest@127.0.0.1/v"
    few = plan_migration(queues(24), source=uri, destination=uri + "2").document
    assert "shovels_per_process" not in few
    assert plan_migration(queues(25), source=uri, destination=uri + "2"
                          ).document["shovels_per_process"] == 25
    # at most 16 processes
    many = plan_migration(queues(1000), source=uri, destination=uri + "2").document
    assert many["shovels_per_process"] == 63
    assert parse_config(many).shovels_per_process == 63  # what pumpd check reads
    assert plan_migration(queues(3), source=uri, destination=uri + "2", shovels_per_process=2
                          ).document["shovels_per_process"] == 2
    # names stay unique and usable as shovel names
    odd = [{"name": "a\tb", "durable": True}, {"name": "a_b", "durable": True}]
    names = list(plan_migration(odd, source=uri, destination=uri + "2").document["shovels"])
    assert sorted(names) == ["a_b", "a_b~2"]


def test_help_explains_the_command() -> None:
    result = pumpd("plan-migration", "--help")
    assert result.returncode == 0
    for words in ("--include", "--exclude", "--management-port", "--management-url",
                  "--shovels-per-process", "exclusive", "server-named", "x-stream-offset",
                  "pumpd check"):
        assert words in result.stdout
    assert "plan-migration" in pumpd("--help").stdout


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

