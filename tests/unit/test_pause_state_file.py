"""The state file keeps the paused names and the shovels' definitions apart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pumpd.supervisor import statefile
from pumpd.testing.localnode import find_free_port

NOWHERE = f"amqp://guest:guest@127.0.0.1:{find_free_port()}/%2F"  # nothing listens there


def test_the_state_file_keeps_pauses_and_shovels_apart(tmp_path: Path) -> None:
    path = tmp_path / "s.runtime.json"
    definition = {"src-uri": NOWHERE, "src-queue": "in", "dest-uri": NOWHERE, "dest-queue": "out"}
    assert statefile.load_paused(path) == frozenset()  # no file yet
    statefile.save(path, {}, ["b", "a", "a"])
    assert json.loads(path.read_text()) == {"shovels": {}, "paused": ["a", "b"]}
    statefile.save(path, {"rt": definition}, ["a", "b"])
    assert statefile.load_paused(path) == {"a", "b"} and statefile.load(path) == {"rt": definition}
    statefile.save(path, {"rt": definition}, [])  # none paused: the key goes, as an old pumpd
    assert json.loads(path.read_text()) == {"shovels": {"rt": definition}}
    path.write_text(json.dumps({"shovels": {}, "paused": "a"}))
    with pytest.raises(statefile.StateFileError, match="must be a list of shovel names"):
        statefile.load_paused(path)

