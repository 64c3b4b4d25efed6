"""``pumpd check`` prints the warnings of a configuration."""

from __future__ import annotations

from typing import Any

import pytest


def test_check_prints_the_warnings(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from pumpd.cli.dispatch import main

    path = tmp_path / "shovels.json"
    path.write_text('{"shovels": {"s": {"src-uri": "amqp://h", "src-queue": "q", '
                    '"dest-uri": "amqp://h", "dest-queue": "d", "dest-exchange-key": "k", '
                    '"reconnect-delay": 2.5}}}')
    assert main(["check", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "  warning: clause 'dest-exchange-key': ignored, as the plugin does" in out
    assert "  warning: clause 'reconnect-delay': 2.5 s" in out

