"""The pumpd command without a broker: bad configurations and their exit codes, ``pumpd check``,
``pumpd import-erlang``, and help texts that no secret scanner mistakes for a secret."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from pumpd.config.parse import parse_config

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
    done = pumpd("import-erlang", str(DATA / "seed_example.config"))
    assert done.returncode == 0, done.stderr
    doc = orjson.loads(done.stdout)
    assert parse_config(doc).shovels["my_first_shovel"].prefetch_count == 10


def test_import_erlang_error_has_a_position(tmp_path: Path) -> None:
    p = tmp_path / "broken.config"
    p.write_text("[{rabbitmq_shovel, [{shovels, [{s, [{queue, <<\"q\">>}\n  oops]}]}]}].")
    done = pumpd("import-erlang", str(p))
    assert done.returncode == 2 and "broken.config:2:" in done.stderr


@pytest.mark.parametrize("command", ["", "status", "pause", "resume", "delete-shovel", "check",
                                     "plan-migration", "import-erlang", "import-definitions"])
def test_no_help_text_is_mistaken_for_a_secret(command: str) -> None:
    """Everything pumpd prints goes through the redactor, which hides what looks like a URI's
    password: a help text must not look like one ("[https://]HOST:PORT" once printed as
    "HOST:***")."""
    args = [sys.executable, "-m", "pumpd", *([command] if command else []), "--help"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "usage: pumpd" in out.stdout
    assert "***" not in out.stdout, out.stdout

