"""The real ``pumpd import-*`` commands exit 2 with one line, never a traceback, whatever the
file holds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pumpd.config import limits

SHOVEL = """[{rabbitmq_shovel, [{shovels, [{s, [
  {sources, [{broker, "amqp://src"}]},
  {destinations, [{broker, "amqp://dst"}]},
  {queue, <<"q">>}, {prefetch_count, VALUE}]}]}]}]."""


def run(command: str, path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pumpd", command, str(path)],
                          capture_output=True, text=True, timeout=120)


ERLANG_CASES = [
    ("a 5000-digit integer", SHOVEL.replace("VALUE", "9" * 5000),
     "4:38: a number of more than 128 digits"),
    ("a 4000-digit 16# number", SHOVEL.replace("VALUE", "16#" + "f" * 4000),
     "4:38: a number of more than 128 digits"),
    ("a 5000-digit radix", SHOVEL.replace("VALUE", "9" * 5000 + "#1"),
     "a number of more than 128 digits"),
    ("a 5000-digit float", SHOVEL.replace("VALUE", "1." + "5" * 5000),
     "a number of more than 128 digits"),
    ("<<1:N>> with a huge N", SHOVEL.replace("VALUE", "<<1:" + "9" * 20 + ">>"),
     "a segment of 99999999999999999999 bits: a binary holds at most 1048576 bytes"),
    ("<<1:N/unit:256>>", SHOVEL.replace("VALUE", "<<1:40000/unit:256>>"),
     "a binary holds at most 1048576 bytes"),
    ("many segments", SHOVEL.replace("VALUE", "<<" + ",".join(["0:65536/unit:8"] * 20) + ">>"),
     "a binary of more than 1048576 bytes"),
    ("terms nested 100,000 deep", "[" * 100_000 + "]" * 100_000, "nested more than 200 deep"),
    ("a \\x{...} escape with many digits", '"\\x{' + "1" * 5000 + '}".',
     "expected hexadecimal digits and '}'"),
]


@pytest.mark.parametrize("text,fragment", [c[1:] for c in ERLANG_CASES],
                         ids=[c[0] for c in ERLANG_CASES])
def test_import_erlang_refuses_in_one_line(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "rabbitmq.config"
    path.write_text(text)
    proc = run("import-erlang", path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith(f"pumpd: import-erlang: {path}")
    assert fragment in proc.stderr
    assert len(proc.stderr) < 400


@pytest.mark.parametrize("command", ["import-erlang", "import-definitions"])
@pytest.mark.parametrize("data,fragment", [
    (bytes(range(256)) * 64, ""),  # binary garbage
    (b"[{rabbitmq_shovel, \xff\xfe]}].", ""),  # invalid UTF-8
    (b"", ""),
    (b'{"parameters": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", ""),
    (b'{"parameters": [{"component": "shovel", "name": "s", "vhost": "/", "value": '
     + b'{"a":' * 300 + b"1" + b"}" * 300 + b"}]}", ""),
])
def test_any_bytes_are_one_line_and_exit_2(tmp_path: Path, command: str, data: bytes,
                                           fragment: str) -> None:
    path = tmp_path / "input"
    path.write_bytes(data)
    proc = run(command, path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith(f"pumpd: {command}: ")


@pytest.mark.parametrize("command", ["import-erlang", "import-definitions"])
def test_a_huge_file_is_refused_without_reading_it_all(tmp_path: Path, command: str) -> None:
    path = tmp_path / "huge"
    with open(path, "wb") as f:
        f.truncate(limits.MAX_IMPORT_BYTES + 1)  # sparse: nothing is written
    proc = run(command, path)
    assert proc.returncode == 2
    assert proc.stderr == (f"pumpd: {command}: {path}: the file is larger than "
                           f"{limits.MAX_IMPORT_BYTES} bytes: not a configuration\n")


@pytest.mark.parametrize("url", ["http://[::1", "nonsense", "http://h:port"])
def test_a_malformed_management_url_is_one_line(url: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "pumpd", "plan-migration", "--source",
                           "amqp://u:p@h/v", "--destination", "amqp://u:p@d/w",
                           "--management-url", url, "--management-insecure-http"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr

