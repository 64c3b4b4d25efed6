"""The authenticated control plane: the token, the Host check, TLS for the endpoint,
the HTTP server's bounds, and what a shovel added at run time may touch; protected shovels. Against real daemons (``pumpd_daemon``), and a real node where a shovel must run."""

from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
import stat
import subprocess
import sys
import urllib.parse
import warnings
from pathlib import Path
from typing import Any

import pytest
from pumpd import exitcodes
from pumpd.http.server import MAX_BODY, MAX_HEADERS
from pumpd.testing.localnode import LocalNode, find_free_port

from tests.support.daemon_helpers import Daemon, running_state, shovel_def
from tests.support.tls_helpers import self_signed

NOWHERE = f"amqp://guest:guest@127.0.0.1:{find_free_port()}/%2F"  # nothing listens there


def dynamic(uri: str = NOWHERE, **extra: Any) -> dict[str, Any]:
    return {"src-uri": uri, "src-queue": "in", "dest-uri": uri, "dest-queue": "out", **extra}


def pumpd(*args: str, env: dict[str, str] | None = None,
          timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pumpd", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL,
                          env={**os.environ, **(env or {})})


def raw(d: Daemon, data: bytes) -> bytes:
    """Send bytes as they are; the whole answer."""
    with socket.create_connection(("127.0.0.1", d.port), timeout=15) as s:
        s.sendall(data)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def status_line(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def test_changes_need_the_token_and_work_with_it(pumpd_daemon, node_a: LocalNode,
                                                 vhost_a: str) -> None:
    uri = node_a.uri(vhost_a)
    d = pumpd_daemon({"fixed": shovel_def(uri, "cp-in", uri, "cp-out")})
    d.wait_for(lambda: running_state(d, "fixed"), 30, "running")
    mode = stat.S_IMODE(os.stat(d.token_path).st_mode)
    assert mode == 0o600, oct(mode)
    definition = dynamic(uri)
    wrong = {"Authorization": "Bearer " + "x" * 43}
    for headers in ({}, wrong, {"Authorization": "Basic Z3Vlc3Q6Z3Vlc3Q="},
                    {"Authorization": d.token()}):  # the token without its scheme
        for method, path, body in (("PUT", "/api/shovels/rt", definition),
                                   ("DELETE", "/api/shovels/fixed", None),
                                   ("POST", "/api/shovels/fixed/restart", None)):
            status, doc = d.request(method, path, body, headers=headers, auth=False)
            assert status == 401, (method, headers, doc)
            assert doc["reason"] == "a valid bearer token is needed (pumpd's token file)"
    assert d.shovel("rt") is None and d.shovel("fixed")["workers"][0]["restarts"] == 0
    # with it: the same requests work
    assert d.request("PUT", "/api/shovels/rt", definition)[0] == 201
    d.wait_for(lambda: running_state(d, "rt"), 30, "the run-time shovel running")
    assert d.request("POST", "/api/shovels/fixed/restart")[0] == 202
    assert d.request("DELETE", "/api/shovels/rt")[0] == 204
    d.wait_for(lambda: d.shovel("rt") is None, 30, "rt gone")


def test_a_401_says_bearer_and_nothing_else(pumpd_daemon) -> None:
    d = pumpd_daemon({})
    answers = [raw(d, f"GET /api/shovels HTTP/1.1\r\nHost: 127.0.0.1:{d.port}\r\n{auth}"
                      "\r\n".encode()) for auth in ("", "Authorization: Bearer nope\r\n")]
    for answer in answers:
        assert status_line(answer) == 401
        assert b'\r\nWWW-Authenticate: Bearer realm="pumpd"\r\n' in answer
    # missing and wrong look the same
    assert answers[0].partition(b"\r\n\r\n")[2] == answers[1].partition(b"\r\n\r\n")[2]


def test_reads_and_metrics_need_the_token_unless_opened(pumpd_daemon) -> None:
    d = pumpd_daemon({})
    for path in ("/api/shovels", "/api/overview", "/api/shovels/x", "/metrics", "/nothing"):
        assert d.request("GET", path, auth=False)[0] == 401, path
    assert d.request("GET", "/", auth=False)[0] == 200  # the page itself asks for the token
    # Prometheus' `authorization: {type: Bearer, credentials_file: ...}` sends exactly this
    status, text = d.request("GET", "/metrics", headers={"Authorization": f"Bearer {d.token()}"},
                             auth=False)
    assert status == 200 and "pumpd_" in text
    assert d.stop() == 0

    opened = pumpd_daemon({}, "--http-open-reads", "--metrics-open")
    assert opened.token() == d.token()  # the same token file: reused
    for path in ("/api/shovels", "/api/overview", "/metrics"):
        assert opened.request("GET", path, auth=False)[0] == 200, path
    assert opened.request("PUT", "/api/shovels/x", dynamic(), auth=False)[0] == 401
    assert opened.request("DELETE", "/api/shovels/x", auth=False)[0] == 401
    only_metrics = pumpd_daemon({}, "--metrics-open")
    opened.stop()
    assert only_metrics.request("GET", "/metrics", auth=False)[0] == 200
    assert only_metrics.request("GET", "/api/shovels", auth=False)[0] == 401


def test_the_token_file_is_made_once_0600_and_an_unsafe_one_is_refused(
    pumpd_daemon, tmp_path: Path
) -> None:
    d = pumpd_daemon({})
    token = d.token()
    assert len(token) >= 43 and stat.S_IMODE(d.token_path.stat().st_mode) == 0o600
    assert d.stop() == 0
    again = pumpd_daemon({})
    assert again.token() == token  # reused
    assert again.stop() == 0

    d.token_path.chmod(0o640)
    result = pumpd("--config", str(d.config_path), "--http", f"127.0.0.1:{find_free_port()}")
    assert result.returncode == exitcodes.CONFIG_ERROR
    line = result.stderr.strip()
    assert "\n" not in line and "mode 0640" in line and str(d.token_path) in line, line
    assert token not in result.stderr

    elsewhere = tmp_path / "elsewhere.token"
    elsewhere.write_text(token + "\n")
    elsewhere.chmod(0o600)
    d.token_path.unlink()
    d.token_path.symlink_to(elsewhere)
    result = pumpd("--config", str(d.config_path), "--http", f"127.0.0.1:{find_free_port()}")
    assert result.returncode == exitcodes.CONFIG_ERROR and "symbolic link" in result.stderr
    d.token_path.unlink()
    d.token_path.mkdir()
    result = pumpd("--config", str(d.config_path), "--http", f"127.0.0.1:{find_free_port()}")
    assert result.returncode == exitcodes.CONFIG_ERROR and "not a regular file" in result.stderr

    # --http-token-file: made there, 0600, and used
    chosen = tmp_path / "chosen" / "api.token"
    chosen.parent.mkdir()
    own = pumpd_daemon({}, "--http-token-file", str(chosen), start=False)
    own.token_path = chosen
    own.start()
    assert stat.S_IMODE(chosen.stat().st_mode) == 0o600 and own.token() != token
    assert own.request("GET", "/api/overview")[0] == 200


def test_pumpd_status_finds_the_token_by_itself(pumpd_daemon, tmp_path: Path) -> None:
    d = pumpd_daemon({})
    odd = "q\x1b[31mred\x07\u202e\x9b"
    assert d.request("PUT", "/api/shovels/odd", dynamic(**{"src-queue": odd}))[0] == 201
    env = {"PUMPD_TOKEN_FILE": ""}
    result = pumpd("status", "--http", f"127.0.0.1:{d.port}", env=env)
    assert result.returncode == 0, result.stderr
    assert "odd" in result.stdout
    # a name, a queue or a broker's reply text never reaches the terminal as escape codes
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert "q\\x1b[31mred\\x07\\u202e\\x9b" in result.stdout
    # JSON: the same strings, every control character escaped
    result = pumpd("status", "--json", "--http", f"127.0.0.1:{d.port}", env=env)
    assert json.loads(result.stdout)["shovels"][0]["src_queue"] == odd
    assert not any(c in result.stdout for c in "\x1b\x07\u202e\x9b")

    # the token file named explicitly, by option or environment
    stray = tmp_path / "stray.token"
    stray.write_text("y" * 43)
    for extra_env, args in (({"PUMPD_TOKEN_FILE": str(stray)}, ()),
                            (env, ("--http-token-file", str(stray)))):
        result = pumpd("status", "--http", f"127.0.0.1:{d.port}", *args, env=extra_env)
        assert result.returncode == exitcodes.UNAVAILABLE
        assert "HTTP 401" in result.stderr and "--http-token-file" in result.stderr
    result = pumpd("status", "--http", f"127.0.0.1:{d.port}",
                   env={"PUMPD_TOKEN_FILE": str(d.token_path)})
    assert result.returncode == 0 and "odd" in result.stdout

    # the record names the daemon's pid: once it has gone, no token goes to that port
    assert d.stop() == 0
    record = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local/state",
                  "pumpd", f"endpoint-{d.port}.json")
    if not os.environ.get("XDG_RUNTIME_DIR"):
        assert not record.exists()  # removed on a clean stop


def test_help_names_every_option_of_the_endpoint() -> None:
    text = pumpd("--help").stdout
    for option in ("--http-token-file", "--http-open-reads", "--metrics-open",
                   "--http-allowed-host", "--http-tls-cert", "--http-tls-key",
                   "--http-insecure-bind", "--tls-dir", "delete-shovel", "?force=true"):
        assert option in text, option
    text = pumpd("status", "--help").stdout
    for option in ("--http-token-file", "--http-ca", "PUMPD_TOKEN_FILE", "https"):
        assert option in text, option
    assert "--force" in pumpd("delete-shovel", "--help").stdout


def test_a_host_that_does_not_name_the_endpoint_is_refused(pumpd_daemon) -> None:
    d = pumpd_daemon({}, "--http-allowed-host", "pumpd.internal")
    for host in ("evil.example", f"evil.example:{d.port}", f"127.0.0.1:{d.port + 1}", "",
                 "127.0.0.1:x", f"localhost.evil.example:{d.port}"):
        status, doc = d.request("GET", "/api/shovels", headers={"Host": host})
        assert status == 403 and "Host header" in doc["reason"], (host, doc)
        assert d.request("GET", "/", headers={"Host": host}, auth=False)[0] == 403, host
    for host in (f"127.0.0.1:{d.port}", f"localhost:{d.port}", "localhost", f"[::1]:{d.port}",
                 "pumpd.internal", "PUMPD.internal:443"):
        assert d.request("GET", "/api/shovels", headers={"Host": host})[0] == 200, host
    # no Host at all (HTTP/1.0 style): refused too
    answer = raw(d, f"GET /api/shovels HTTP/1.1\r\nAuthorization: Bearer {d.token()}\r\n\r\n"
                 .encode())
    assert status_line(answer) == 403


def test_content_length_and_headers_are_read_strictly(pumpd_daemon) -> None:
    d = pumpd_daemon({})
    head = (f"PUT /api/shovels/x HTTP/1.1\r\nHost: 127.0.0.1:{d.port}\r\n"
            f"Authorization: Bearer {d.token()}\r\n")
    body = json.dumps(dynamic()).encode()
    for length_headers, expected in (
        (["Content-Length: 1_0"], 400), (["Content-Length: +10"], 400),
        (["Content-Length: -1"], 400), (["Content-Length: 0x10"], 400),
        (["Content-Length: 1 0"], 400),
        (["Content-Length: \u0661\u0660"], 400),  # Arabic-Indic digits: int() takes them
        ([f"Content-Length: {len(body)}", f"Content-Length: {len(body) + 1}"], 400),
        (["Transfer-Encoding: chunked"], 411),
        ([f"Content-Length: {MAX_BODY + 1}"], 413),
        ([f"X-{i}: y" for i in range(MAX_HEADERS + 1)], 431),
        (["Bad Header: y"], 400),
    ):
        text = head + "".join(h + "\r\n" for h in length_headers) + "\r\n"
        answer = raw(d, text.encode("utf-8") + body)
        assert status_line(answer) == expected, (length_headers, answer[:200])
    assert status_line(raw(d, b"GARBAGE\r\n\r\n")) == 400
    assert status_line(raw(d, b"GET / HTTP/1.1\r\nX: " + b"y" * 20000 + b"\r\n\r\n")) == 431
    assert d.shovel("x") is None
    # the same body, well framed (a repeated identical Content-Length is fine)
    text = head + f"Content-Length: {len(body)}\r\nContent-Length: {len(body)}\r\n\r\n"
    assert status_line(raw(d, text.encode() + body)) == 201


def test_a_non_loopback_address_needs_tls(tmp_path: Path) -> None:
    cfg = tmp_path / "c.json"
    cfg.write_text('{"shovels": {}}')
    port = find_free_port()
    result = pumpd("--config", str(cfg), "--http", f"0.0.0.0:{port}")
    assert result.returncode == exitcodes.CONFIG_ERROR
    assert result.stderr.count("\n") == 1 and "--http-insecure-bind" in result.stderr
    assert "--http-tls-cert" in result.stderr
    result = pumpd("--config", str(cfg), "--http-tls-cert", str(cfg))
    assert result.returncode == exitcodes.CONFIG_ERROR and "go together" in result.stderr
    result = pumpd("--config", str(cfg), "--http-tls-cert", str(cfg), "--http-tls-key", str(cfg))
    assert result.returncode == exitcodes.CONFIG_ERROR and "cannot be used" in result.stderr


def test_the_endpoint_over_tls(pumpd_daemon, tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    d = pumpd_daemon({}, "--http-tls-cert", str(cert), "--http-tls-key", str(key), start=False)
    d.scheme = "https"
    d.context = ssl.create_default_context(cafile=str(cert))
    d.start()
    assert d.request("PUT", "/api/shovels/t", dynamic())[0] == 201
    status, doc = d.request("GET", "/api/shovels/t")
    assert status == 200 and doc["name"] == "t"
    assert d.request("GET", "/api/shovels", auth=False)[0] == 401
    old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    old.load_verify_locations(str(cert))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old.maximum_version = ssl.TLSVersion.TLSv1_1
    with pytest.raises(OSError):
        d.request("GET", "/api/shovels", context=old)
    # plain HTTP to the TLS port gets nothing useful
    with pytest.raises((OSError, http.client.HTTPException)):
        d.request("GET", "/api/overview", scheme="http")
    # pumpd status: https and the daemon's own certificate found from its record
    result = pumpd("status", "--http", f"127.0.0.1:{d.port}", env={"PUMPD_TOKEN_FILE": ""})
    assert result.returncode == 0 and "t " in result.stdout, result.stderr
    result = pumpd("status", "--http", f"https://localhost:{d.port}", "--http-ca", str(cert),
                   env={"PUMPD_TOKEN_FILE": ""})
    assert result.returncode == 0, result.stderr


def tls_uri(**files: str) -> str:
    query = "&".join(f"{k}={urllib.parse.quote(v, safe='/')}" for k, v in files.items())
    return f"amqps://guest:guest@127.0.0.1:{find_free_port()}/%2F?{query}"


def test_tls_files_of_a_put_only_under_tls_dir(pumpd_daemon, tmp_path: Path) -> None:
    allowed = tmp_path / "tls"
    allowed.mkdir()
    (allowed / "ca.pem").write_text("not read by this test\n")
    (allowed / "escape.pem").symlink_to(tmp_path / "shovels.json")
    outside = tmp_path / "client.key"
    none_allowed = pumpd_daemon({})
    status, doc = none_allowed.request("PUT", "/api/shovels/t", dynamic(
        tls_uri(cacertfile=str(allowed / "ca.pem"))))
    assert status == 400 and "'cacertfile'" in doc["reason"] and "--tls-dir" in doc["reason"]
    none_allowed.stop()

    d = pumpd_daemon({}, "--tls-dir", str(allowed), "--tls-dir", str(tmp_path / "tls"))
    refused = {
        "certfile": tls_uri(certfile=str(outside), keyfile=str(allowed / "ca.pem")),
        "keyfile": tls_uri(certfile=str(allowed / "ca.pem"), keyfile=str(outside)),
        "cacertfile": tls_uri(cacertfile=str(allowed / ".." / "client.key")),
    }
    for option, uri in refused.items():
        status, doc = d.request("PUT", "/api/shovels/t", dynamic(uri))
        assert status == 400 and f"'{option}'" in doc["reason"], (option, doc)
        assert "not under a directory allowed by --tls-dir" in doc["reason"]
    status, doc = d.request("PUT", "/api/shovels/t", dynamic(
        tls_uri(cacertfile=str(allowed / "escape.pem"))))  # a link out of the directory
    assert status == 400 and "'cacertfile'" in doc["reason"]
    # the answer is the same whether the file exists or not: no probing
    a = d.request("PUT", "/api/shovels/t", dynamic(tls_uri(cacertfile="/etc/passwd")))[1]
    b = d.request("PUT", "/api/shovels/t", dynamic(tls_uri(cacertfile="/etc/no-such-file")))[1]
    assert a["reason"] == b["reason"]
    status, doc = d.request("PUT", "/api/shovels/ext", dynamic(
        tls_uri(cacertfile=str(allowed / "ca.pem")) + "&auth_mechanism=plain"
        "&auth_mechanism=external"))
    assert status == 400 and "auth_mechanism=external" in doc["reason"], doc
    assert d.shovel("t") is None and d.shovel("ext") is None
    status, doc = d.request("PUT", "/api/shovels/t", dynamic(
        tls_uri(cacertfile=str(allowed / "ca.pem"), certfile=str(allowed / "ca.pem"),
                keyfile=str(allowed / "ca.pem")) + "&auth_mechanism=external"))
    assert status == 201, doc


def test_the_daemons_own_files_are_never_a_puts_tls_file(pumpd_daemon, tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    d = pumpd_daemon({}, "--tls-dir", str(tmp_path), "--http-tls-cert", str(cert),
                     "--http-tls-key", str(key), start=False)
    d.scheme, d.context = "https", ssl.create_default_context(cafile=str(cert))
    d.start()
    for own in (d.token_path, d.state_path, d.config_path, key, cert):
        status, doc = d.request("PUT", "/api/shovels/t", dynamic(tls_uri(cacertfile=str(own))))
        assert status == 400 and "pumpd's own" in doc["reason"], (own, doc)


@pytest.mark.parametrize("method", ["queue.delete", "queue.purge", "queue.unbind",
                                    "exchange.delete", "exchange.unbind"])
def test_destructive_declarations_are_refused_in_a_put(pumpd_daemon, method: str,
                                                       tmp_path: Path) -> None:
    fields = {"queue.unbind": {"exchange": "x"}, "exchange.delete": {"exchange": "x"},
              "exchange.unbind": {"destination": "a", "source": "b"}}.get(method, {"queue": "q"})
    definition = shovel_def(NOWHERE, "in", NOWHERE, "out")
    definition["destinations"]["declarations"].append({method: fields})
    d = pumpd_daemon({})
    status, doc = d.request("PUT", "/api/shovels/t", definition)
    assert status == 400 and f"'{method}'" in doc["reason"], doc
    assert d.shovel("t") is None
    # a configuration file may still use it
    cfg = tmp_path / "file.json"
    cfg.write_text(json.dumps({"shovels": {"t": definition}}))
    assert pumpd("check", "--config", str(cfg)).returncode == 0


def test_a_put_answers_at_once_without_a_connection_result(pumpd_daemon) -> None:
    d = pumpd_daemon({})
    status, doc = d.request("PUT", "/api/shovels/probe", dynamic())
    assert status == 201 and doc["state"] == "starting" and doc["reason"] is None, doc
    # the failure is kept in the state, for the token holder who asks
    d.wait_for(lambda: "refused" in (d.shovel("probe")["reason"] or ""), 30, "the reason")


def test_a_protected_shovel_is_deleted_or_replaced_only_when_forced(pumpd_daemon,
                                                                    tmp_path: Path) -> None:
    d = pumpd_daemon({})
    owner = {"name": "src", "kind": "queue", "virtual_host": "/"}
    assert d.request("PUT", "/api/shovels/p", dynamic(internal=True, internal_owner=owner))[0] \
        == 201
    assert d.request("PUT", "/api/shovels/plain", dynamic(internal=False))[0] == 201
    doc = d.shovel("p")
    assert doc["internal"] is True and doc["internal_owner"] == owner
    assert d.shovel("plain")["internal"] is False and d.shovel("plain")["internal_owner"] is None
    status, doc = d.request("DELETE", "/api/shovels/p")
    assert status == 409, doc
    assert doc["reason"] == ("cannot delete protected shovel 'p': it was declared as protected "
                             "(owner: queue 'src' in vhost '/'); delete it with ?force=true")
    status, doc = d.request("PUT", "/api/shovels/p", dynamic(internal=False))
    assert status == 409 and "cannot replace protected shovel 'p'" in doc["reason"]
    assert d.request("DELETE", "/api/shovels/p?force=false")[0] == 409
    assert d.shovel("p")["internal"] is True
    result = pumpd("status", "--http", f"127.0.0.1:{d.port}")
    (line,) = [x for x in result.stdout.splitlines() if x.startswith("p ")]
    assert "(protected)" in line
    assert d.request("PUT", "/api/shovels/p?force=true", dynamic(internal=True))[0] == 200
    assert d.shovel("p")["internal_owner"] is None
    result = pumpd("delete-shovel", "p", "--http", f"127.0.0.1:{d.port}")
    assert result.returncode == exitcodes.UNAVAILABLE and "HTTP 409" in result.stderr
    assert "cannot delete protected shovel 'p'" in result.stderr
    result = pumpd("delete-shovel", "p", "--force", "--http", f"127.0.0.1:{d.port}")
    assert result.returncode == 0, result.stderr
    d.wait_for(lambda: d.shovel("p") is None, 30, "p deleted")
    assert d.request("DELETE", "/api/shovels/plain")[0] == 204
    for bad, why in (({"internal": "yes"}, "'internal'"),
                     ({"internal_owner": {"name": "q", "kind": "stream", "virtual_host": "/"}},
                      "'internal_owner.kind'"),
                     ({"internal_owner": {"name": "q", "kind": "queue"}},
                      "'internal_owner.virtual_host'")):
        status, doc = d.request("PUT", "/api/shovels/bad", dynamic(**bad))
        assert status == 400 and why in doc["reason"], (bad, doc)


def test_internal_and_its_owner_come_through_import_definitions(tmp_path: Path) -> None:
    owner = {"name": "src", "kind": "queue", "virtual_host": "/"}
    export = {"parameters": [{"component": "shovel", "vhost": "/", "name": "s", "value": {
        **dynamic(), "internal": True, "internal_owner": owner}}]}
    (tmp_path / "defs.json").write_text(json.dumps(export))
    result = pumpd("import-definitions", str(tmp_path / "defs.json"))
    assert result.returncode == 0, result.stderr
    shovels = json.loads(result.stdout)["shovels"]
    assert shovels["s"]["internal"] is True and shovels["s"]["internal_owner"] == owner
    (tmp_path / "c.json").write_text(result.stdout)
    assert pumpd("check", "--config", str(tmp_path / "c.json")).returncode == 0

