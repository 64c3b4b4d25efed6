"""The ``cluster`` clause a position's lease needs, as read and as refused (on the command line
too, never showing a password), and the fence's wait of half the heartbeat timeout."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pumpd.cli.dispatch import main as cli_main
from pumpd.config.parse import ConfigError, parse_config
from pumpd.engine.fence import fence_after

SHOVEL = {"sources": {"broker": "amqp://"}, "destinations": {"broker": "amqp://"},
          "queue": "q"}


def test_the_cluster_clause_is_read_with_defaults() -> None:
    cfg = parse_config({"cluster": {"name": "eu-1"}, "shovels": {"s": SHOVEL}})
    assert cfg.cluster is not None
    assert (cfg.cluster.name, cfg.cluster.lease_retry, cfg.cluster.coordination_uri) == (
        "eu-1", 2.0, None)
    cfg = parse_config({"cluster": {"name": "a_b-c", "lease_retry": 0.5,
                                    "coordination_uri": "amqp://u:s3cret@h/v"},
                        "shovels": {"s": SHOVEL}})
    assert cfg.cluster is not None and cfg.cluster.lease_retry == 0.5
    assert cfg.cluster.coordination_uri is not None
    assert "s3cret" not in repr(cfg.cluster)


@pytest.mark.parametrize(("cluster", "clause", "words"), [
    ({"name": ""}, "cluster.name", "1 to 64 characters"),
    ({"name": "a b"}, "cluster.name", "1 to 64 characters"),
    ({"name": "a.b"}, "cluster.name", "no dots"),
    ({"name": "c", "settle": -1}, "cluster.settle", "non-negative"),
    ({"name": "x" * 65}, "cluster.name", "1 to 64 characters"),
    ({"name": 3}, "cluster.name", "must be a string"),
    ({}, "cluster", 'missing "name"'),
    ({"name": "c", "lease_retry": 0}, "cluster.lease_retry", "at least 0.1"),
    ({"name": "c", "leas_retry": 1}, "cluster.leas_retry", "lease_retry"),
    ({"name": "c", "coordination_uri": "http://x"}, "cluster.coordination_uri", "http"),
    ("c", "cluster", "must be an object"),
])
def test_a_bad_cluster_clause_is_named(cluster: Any, clause: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"cluster": cluster, "shovels": {"s": SHOVEL}}, source="f.json")
    assert err.value.clause == clause
    assert words in str(err.value)


def test_a_bad_cluster_uri_never_shows_its_password() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"cluster": {"name": "c", "coordination_uri": "amqp://u:pw-1234@h:99999"},
                      "shovels": {"s": SHOVEL}})
    assert "pw-1234" not in str(err.value)


def test_the_command_line_refuses_a_bad_cluster_name(capsys: pytest.CaptureFixture[str],
                                                      tmp_path: Any) -> None:
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"shovels": {"s": SHOVEL}}))
    with pytest.raises(SystemExit) as exit_:
        cli_main(["--config", str(config), "--cluster", "no spaces"])
    assert exit_.value.code == 2
    assert "--cluster" in capsys.readouterr().err


def test_fencing_waits_half_the_heartbeat_timeout() -> None:
    assert fence_after(4) == 2.0
    assert fence_after(0) > 0  # heartbeats off: a fixed stand-still still fences

