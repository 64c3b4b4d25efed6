"""SIGHUP: re-read the configuration and touch only the shovels whose definition changed."""

from __future__ import annotations

import signal

from pumpd.testing.localnode import LocalNode

from amqp_helpers import queue_depth
from daemon_helpers import fill_queue, pumpd_daemon, running_state, settled, shovel_def

__all__ = ["pumpd_daemon"]


def test_sighup_restarts_changed_starts_new_stops_removed_and_leaves_the_rest(
    pumpd_daemon, node_a: LocalNode, vhost_a: str
) -> None:
    uri = node_a.uri(vhost_a)

    def s(n: str, **kw: object) -> dict[str, object]:
        return shovel_def(uri, f"{n}-in", uri, f"{n}-out", **kw)

    d = pumpd_daemon({"same": s("same"), "changed": s("changed"), "removed": s("removed")})
    for name in ("same", "changed", "removed"):
        d.wait_for(lambda name=name: running_state(d, name), 30, f"{name} running")
    pids = {name: d.worker_pids(name) for name in ("same", "changed", "removed")}

    d.write_config({"same": s("same"), "changed": s("changed", prefetch_count=10),
                    "added": s("added")})
    d.signal(signal.SIGHUP)
    d.wait_for(lambda: running_state(d, "added"), 30, "the new shovel running")
    d.wait_for(lambda: d.shovel("removed") is None, 30, "the removed shovel gone")
    d.wait_for(lambda: running_state(d, "changed")
               and d.worker_pids("changed") != pids["changed"], 30, "the changed one restarted")
    assert d.shovel("changed")["prefetch_count"] == 10
    assert d.worker_pids("same") == pids["same"]
    assert d.shovel("same")["restarts"] == 0
    assert settled(node_a, vhost_a, "removed-in") == (0, 0, 0)  # its consumer is gone
    (reloaded,) = [e for e in d.log_events() if e.get("event") == "reloaded"]
    assert (reloaded["added"], reloaded["changed"], reloaded["removed"], reloaded["unchanged"]) \
        == (["added"], ["changed"], ["removed"], ["same"])

    # an invalid file is refused: everything keeps running as it was
    d.config_path.write_text('{"shovels": {"same": {"queue": 42}}}')
    pids = {name: d.worker_pids(name) for name in ("same", "changed", "added")}
    d.signal(signal.SIGHUP)
    d.wait_for(lambda: any(e.get("event") == "reload_failed" for e in d.log_events()), 30,
               "the reload refused")
    assert {name: d.worker_pids(name) for name in ("same", "changed", "added")} == pids
    fill_queue(uri, "same-in", [b"still moving"])
    d.wait_for(lambda: queue_depth(uri, "same-out")[0] == 1, 30, "the shovel still moving")
    assert d.stop() == 0
