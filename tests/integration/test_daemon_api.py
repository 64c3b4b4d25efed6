"""The HTTP endpoint: run-time add, restart and delete, the state file, errors, metrics, and
credentials never shown."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

from pumpd.testing.localnode import LocalNode

from tests.support.amqp_helpers import drain_queue, queue_depth
from tests.support.daemon_helpers import fill_queue, running_state, settled, shovel_def

SECRET = "s3cr3t-Pa55"


def test_add_restart_and_delete_a_shovel_at_run_time(
    pumpd_daemon, node_a: LocalNode, vhost_a: str
) -> None:
    node_a.add_user("api-user", SECRET, vhost_a)
    uri = node_a.uri(vhost_a)
    secret_uri = node_a.uri(vhost_a, "api-user", SECRET)
    d = pumpd_daemon({"fixed": shovel_def(uri, "f-in", uri, "f-out")})
    d.wait_for(lambda: running_state(d, "fixed"), 30, "the configured shovel running")

    # PUT: the dynamic-shovel form, as `rabbitmqctl set_parameter shovel` takes it
    definition = {"src-uri": secret_uri, "src-queue": "rt-in", "dest-uri": secret_uri,
                  "dest-queue": "rt-out"}
    status, doc = d.request("PUT", "/api/shovels/run%20time", definition)
    assert status == 201, doc
    assert doc["name"] == "run time" and doc["origin"] == "runtime"
    d.wait_for(lambda: running_state(d, "run time"), 30, "the new shovel running")
    saved = json.loads(d.state_path.read_text())
    assert saved == {"shovels": {"run time": definition}}
    assert stat.S_IMODE(os.stat(d.state_path).st_mode) == 0o600  # it holds passwords
    fill_queue(uri, "rt-in", [b"a%d" % i for i in range(100)])
    d.wait_for(lambda: queue_depth(uri, "rt-out")[0] == 100, 30, "100 moved")

    # PUT of the same definition changes nothing; restart replaces the worker
    (pid,) = d.worker_pids("run time")
    assert d.request("PUT", "/api/shovels/run%20time", {"value": definition})[0] == 200
    assert d.worker_pids("run time") == [pid]
    status, _ = d.request("POST", "/api/shovels/run%20time/restart")
    assert status == 202
    d.wait_for(lambda: d.worker_pids("run time")[0] not in (None, pid)
               and running_state(d, "run time"), 30, "restarted")
    (w,) = d.shovel("run time")["workers"]
    assert w["restarts"] == 1 and w["last_exit"].startswith("restarted on request")

    # metrics: series per shovel and worker, counters carried over the restart
    metrics = d.request("GET", "/metrics")[1]
    assert 'pumpd_messages_acked_total{shovel="run time",worker="0"} 100' in metrics
    assert 'pumpd_worker_restarts_total{shovel="run time",worker="0"} 1' in metrics
    assert 'pumpd_shovel_state{shovel="fixed",state="running"} 1' in metrics
    assert re.search(r'^pumpd_worker_up\{shovel="fixed",worker="0"\} 1$', metrics, re.M)

    # errors
    assert d.request("PUT", "/api/shovels/fixed", definition)[0] == 409
    assert d.request("DELETE", "/api/shovels/fixed")[0] == 409
    status, doc = d.request("PUT", "/api/shovels/bad", {"src-uri": secret_uri})
    assert status == 400 and "bad" in doc["reason"]
    assert d.request("PUT", "/api/shovels/bad", b"{not json")[0] == 400
    assert d.request("DELETE", "/api/shovels/nope")[0] == 404
    assert d.request("POST", "/api/shovels/nope/restart")[0] == 404
    assert d.request("GET", "/api/nothing")[0] == 404
    assert d.request("DELETE", "/api/shovels/run%20time",
                     headers={"Origin": "http://evil.example"})[0] == 403
    assert d.shovel("bad") is None

    # credentials: never in a response or a log line
    texts = [json.dumps(d.shovels()), json.dumps(d.get("/api/overview")), metrics, d.log(10_000)]
    for text in texts:
        assert SECRET not in text
    assert "amqp://api-user@" in texts[0]

    # a restart of pumpd brings the run-time shovel back from the state file
    assert d.stop() == 0
    d2 = pumpd_daemon({"fixed": shovel_def(uri, "f-in", uri, "f-out")})
    d2.wait_for(lambda: running_state(d2, "run time"), 30, "the run-time shovel back")
    assert d2.shovel("run time")["origin"] == "runtime"

    # DELETE: the workers drain and the shovel goes, from the status and the state file
    status, _ = d2.request("DELETE", "/api/shovels/run%20time")
    assert status == 204
    d2.wait_for(lambda: d2.shovel("run time") is None, 30, "the shovel gone")
    assert json.loads(d2.state_path.read_text()) == {"shovels": {}}
    assert settled(node_a, vhost_a, "rt-in") == (0, 0, 0)
    assert len(drain_queue(uri, "rt-out", expected=100, timeout=10)) == 100
    assert running_state(d2, "fixed")
    assert d2.stop() == 0


def test_overview_and_single_shovel_documents(pumpd_daemon, node_a: LocalNode,
                                              vhost_a: str) -> None:
    uri = node_a.uri(vhost_a)
    d = pumpd_daemon({"s": shovel_def(uri, "in", uri, "out", prefetch_count=7,
                                      source_read_hold_ms=3, stall_timeout=7)})
    d.wait_for(lambda: running_state(d, "s"), 30, "running")
    overview = d.get("/api/overview")
    assert overview["pid"] == d.pid and overview["shovels"] == 1 and overview["workers"] == 1
    blocks = overview["slot_blocks"]
    assert blocks and all(Path("/dev/shm", b).exists() for b in blocks)
    doc = d.shovel("s")
    # the management plugin's shovel status fields
    for field in ("name", "type", "state", "timestamp", "src_uri", "src_protocol", "src_queue",
                  "dest_uri", "dest_protocol", "dest_exchange", "dest_exchange_key", "reason"):
        assert field in doc
    assert (doc["type"], doc["src_queue"], doc["dest_exchange"], doc["dest_exchange_key"]) == \
        ("pumpd", "in", "", "out")
    assert doc["prefetch_count"] == 7 and doc["implementation"] in ("native", "reference")
    assert doc["source_read_hold_ms"] == 3
    assert doc["stall_timeout"] == 7 and doc["counters"]["stall_restarts"] == 0
    assert set(doc["rates"]) >= {"consumed", "published", "acked"}
    (w,) = doc["workers"]
    assert w["heartbeat_age"] is not None and w["heartbeat_age"] < 10
    assert w["state"] == "running" and w["timestamp"].endswith("Z")
    assert d.stop() == 0
    assert not any(Path("/dev/shm", b).exists() for b in blocks)  # unlinked on a clean stop
