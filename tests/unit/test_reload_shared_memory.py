"""A reload refused by a shared-memory failure changes nothing (the coordinator's bookkeeping,
without its loop: no process is started)."""

from __future__ import annotations

import errno
import json
import logging
from functools import partial
from pathlib import Path

import pytest
from pumpd.supervisor import definitions
from pumpd.supervisor.coordinator import Coordinator, DaemonOptions
from pumpd.supervisor.slots import SlotPool, SlotRef, SlotsUnavailable

from tests.support.daemon_helpers import (
    named_shovel,
)


class _NoShm(SlotPool):
    """A pool whose shared memory has run out (/dev/shm full): the failure add() can meet."""

    def __init__(self, fail_after: int) -> None:
        super().__init__(block_size=1)
        self.left = fail_after

    def allocate(self) -> SlotRef:
        if self.left <= 0 and not self._free:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.left -= 1
        return super().allocate()


def test_a_shared_memory_failure_refuses_the_reload_and_changes_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The coordinator's own bookkeeping, without its loop: no process is started."""
    s = partial(named_shovel, "amqp://h")

    config = tmp_path / "shovels.json"
    config.write_text(json.dumps({"shovels": {"a": s("a", workers=2)}}))
    opts = DaemonOptions(str(config), str(tmp_path / "state.json"), None)
    coordinator = Coordinator(opts, {})
    coordinator.pool = _NoShm(fail_after=3)
    try:
        for name, definition in definitions.load_file(config, None).items():
            coordinator.add(name, definition, 0.0)
        before = {n: (sh.definition, [w.slot for w in sh.positions])
                  for n, sh in coordinator.shovels.items()}
        # one more slot is there, two are asked for: refused, nothing added or changed
        config.write_text(json.dumps({"shovels": {"a": s("a", workers=3), "b": s("b")}}))
        with caplog.at_level(logging.ERROR, "pumpd.coordinator"):
            coordinator._reload(1.0)
        assert f"reload refused, the running configuration is kept: {config}: cannot allocate 2 " \
               "status slot(s) in shared memory: OSError: [Errno 28]" in caplog.text
        assert {n: (sh.definition, [w.slot for w in sh.positions])
                for n, sh in coordinator.shovels.items()} == before
        with pytest.raises(SlotsUnavailable):
            coordinator.add("c", definitions.load_file(config, None)["a"], 2.0)
        assert set(coordinator.shovels) == {"a"}
        # the slot reserve gave back what it took: one slot still there for a 1-worker shovel
        config.write_text(json.dumps({"shovels": {"a": s("a", workers=2), "b": s("b")}}))
        coordinator._reload(3.0)
        assert set(coordinator.shovels) == {"a", "b"}
    finally:
        coordinator.pool.close()

