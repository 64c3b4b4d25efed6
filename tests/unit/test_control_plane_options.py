"""The HTTP endpoint's options without a running daemon: the help names every one, a non-loopback
address needs TLS, text from outside is escaped before it is printed, and ``internal`` with its
owner comes through ``pumpd import-definitions``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from pumpd import exitcodes
from pumpd.daemon.client import printable
from pumpd.testing.localnode import find_free_port

NOWHERE = f"amqp://guest:guest@127.0.0.1:{find_free_port()}/%2F"  # nothing listens there


def dynamic(uri: str = NOWHERE, **extra: Any) -> dict[str, Any]:
    return {"src-uri": uri, "src-queue": "in", "dest-uri": uri, "dest-queue": "out", **extra}


def pumpd(*args: str, env: dict[str, str] | None = None,
          timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pumpd", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL,
                          env={**os.environ, **(env or {})})


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


def test_printable_escapes_every_control_and_format_character() -> None:
    assert printable("plain text, ünïcode") == "plain text, ünïcode"
    assert printable("a\x1b]0;title\x07b\r\n\t") == "a\\x1b]0;title\\x07b\\x0d\\x0a\\x09"
    assert printable("x\u202ey\u200bz\x9b") == "x\\u202ey\\u200bz\\x9b"


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

