"""--workers N: competing consumers on one source queue, shown worker by worker in the status."""

from __future__ import annotations

import subprocess
import sys

import orjson
from pumpd.testing.localnode import LocalNode

from tests.support.amqp_helpers import drain_queue, queue_depth
from tests.support.daemon_helpers import fill_queue, running_state, shovel_def


def test_four_workers_drain_one_queue_as_competing_consumers(
    pumpd_daemon, node_a: LocalNode, vhost_a: str
) -> None:
    uri = node_a.uri(vhost_a)
    d = pumpd_daemon({
        "wide": shovel_def(uri, "in", uri, "out", prefetch_count=200),
        # a shovel's own clause wins over --workers: this one stays single and ordered
        "ordered": shovel_def(uri, "in2", uri, "out2", workers=1),
    }, "--workers", "4")
    d.wait_for(lambda: running_state(d, "wide", 4), 60, "four workers running")
    d.wait_for(lambda: running_state(d, "ordered", 1), 30, "the ordered shovel running")
    assert queue_depth(uri, "in") == (0, 4)  # four consumers on the one source queue
    assert queue_depth(uri, "in2") == (0, 1)

    n = 20_000
    sent = [b"w%05d" % i for i in range(n)]
    fill_queue(uri, "in", sent)
    fill_queue(uri, "in2", sent[:1000])
    d.wait_for(lambda: d.shovel("wide")["counters"]["acked"] == n, 120, f"{n} acked")
    d.wait_for(lambda: d.shovel("ordered")["counters"]["acked"] == 1000, 60, "1000 acked")

    doc = d.shovel("wide")
    assert doc["workers_configured"] == 4 and doc["workers_running"] == 4
    workers = doc["workers"]
    assert [w["index"] for w in workers] == [0, 1, 2, 3]
    assert len({w["pid"] for w in workers}) == 4
    # every consumer took its share, and the shares add up (no failure: no duplicate)
    assert all(w["counters"]["consumed"] > 0 for w in workers)
    assert sum(w["counters"]["acked"] for w in workers) == n
    got = drain_queue(uri, "out", expected=n, timeout=60)
    assert sorted(m.body for m in got) == sent
    # one worker keeps the source order
    assert [m.body for m in drain_queue(uri, "out2", expected=1000, timeout=30)] == sent[:1000]

    # `pumpd status --json` shows the same four workers
    out = subprocess.run([sys.executable, "-m", "pumpd", "status", "--http",
                          f"127.0.0.1:{d.port}", "--json"], capture_output=True, timeout=30,
                         check=True).stdout
    shovels = {s["name"]: s for s in orjson.loads(out)["shovels"]}
    assert [w["pid"] for w in shovels["wide"]["workers"]] == [w["pid"] for w in workers]
    assert all({"pid", "state", "restarts", "counters"} <= set(w)
               for w in shovels["wide"]["workers"])
    table = subprocess.run([sys.executable, "-m", "pumpd", "status", "--http",
                            f"127.0.0.1:{d.port}"], capture_output=True, text=True, timeout=30,
                           check=True).stdout
    wide_line = next(line for line in table.splitlines() if line.startswith("wide "))
    assert " running " in wide_line and "4/4" in wide_line
    assert d.stop() == 0
