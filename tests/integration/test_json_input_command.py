"""The configuration file refuses what the JSON reader refuses, with ``pumpd check``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pumpd import exitcodes
from pumpd.config.parse import ConfigError, load_config

BIG = "99999999999999999999"  # 67 bits: orjson reads it as the double 1e+20


DYNAMIC = {"src-uri": "amqp://s", "src-queue": "in", "dest-uri": "amqp://d", "dest-queue": "out"}


def test_the_configuration_file_refuses_as_the_reader_does(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    shovel = {**DYNAMIC, "dest-publish-properties": {"headers": {"big": "BIG"}}}
    path.write_text(json.dumps({"shovels": {"s": shovel}}).replace('"BIG"', BIG))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    e = info.value
    assert (e.shovel, e.clause) == ("s", "dest-publish-properties")
    assert e.message == (f"at headers.big: integer {BIG} does not fit in a signed 64-bit "
                         "integer (-2^63 to 2^63-1)")
    result = subprocess.run([sys.executable, "-m", "pumpd", "check", "--config", str(path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == exitcodes.CONFIG_ERROR, result
    assert "clause 'dest-publish-properties'" in result.stderr and BIG in result.stderr
    # the static form, at an endpoint's broker list and at the top level
    path.write_text('{"shovels": {"s": {"sources": {"brokers": ["amqp://a", 1e999]}}}}')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert (info.value.clause, info.value.message) == (
        "sources", "at brokers[1]: number 1e999 is not finite (too large for a double)")
    path.write_text('{"shovels_per_process": 99999999999999999999, "shovels": {}}')
    with pytest.raises(ConfigError, match="at shovels_per_process: integer 9999"):
        load_config(path)

