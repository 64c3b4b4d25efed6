"""A destination under a memory alarm: the shovel shows ``blocked``, then ``running`` once the
alarm clears, and loses nothing."""

from __future__ import annotations

from pumpd.testing.localnode import LocalNode

from tests.support.amqp_helpers import drain_queue
from tests.support.daemon_helpers import fill_queue, running_state, shovel_def


def test_blocked_while_the_destination_has_a_memory_alarm_then_running(
    pumpd_daemon, node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str
) -> None:
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    d = pumpd_daemon({"s": shovel_def(src, "in", dst, "out", prefetch_count=50)})
    d.wait_for(lambda: running_state(d, "s"), 30, "running")
    sent = [b"b%04d" % i for i in range(500)]
    fill_queue(src, "in", sent[:10])
    d.wait_for(lambda: d.shovel("s")["counters"]["acked"] == 10, 30, "the first 10 through")
    node_b.set_vm_memory_high_watermark(0)
    try:
        # RabbitMQ sends connection.blocked when the connection next publishes: give it some
        fill_queue(src, "in", sent[10:])
        d.wait_for(lambda: d.shovel("s")["state"] == "blocked", 60, "blocked")
        doc = d.shovel("s")
        assert doc["workers"][0]["state"] == "blocked"
        assert doc["workers_running"] == 1  # blocked is not a failure: nothing was restarted
        metrics = d.request("GET", "/metrics")[1]
        assert 'pumpd_shovel_state{shovel="s",state="blocked"} 1' in metrics
        assert 'pumpd_worker_state{shovel="s",worker="0",state="blocked"} 1' in metrics
    finally:
        node_b.set_vm_memory_high_watermark(0.4)
    d.wait_for(lambda: d.shovel("s")["state"] == "running", 60, "running again")
    d.wait_for(lambda: d.shovel("s")["counters"]["acked"] == 500, 60, "all 500 acked")
    doc = d.shovel("s")
    assert doc["restarts"] == 0
    got = drain_queue(dst, "out", expected=500, timeout=30)
    assert [m.body for m in got] == sent
    states = [e["state"] for e in d.log_events()
              if e.get("event") == "state" and e.get("shovel") == "s"]
    assert states[-3:] == ["running", "blocked", "running"]
    assert d.stop() == 0
