"""Issue 23: a group of daemons with a coordination broker spreads its positions evenly, hands
them over gracefully, fails over when a member dies, and takes its shovels from the
configuration file only (``daemon/membership.py``).

Three real daemons (each its own HTTP port, state file and configuration file, as if on three
machines) run the same nine shovels against private nodes. Who consumes what is read from the
source broker's own lists (``rabbitmqctl list_consumers`` / ``list_channels`` /
``list_connections``: a pump's connections are named ``pumpd SHOVEL#I member ID``), never from
pumpd's status; how soon positions ran again is read from the members' logs (a rabbitmqctl list
takes seconds on a loaded machine). Intervals are short (poll 0.5 s, settle 2 s, grace 3 s) so
the group moves within seconds; bench/group_spread.py measures the default ones.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import pytest
from pumpd.daemon.client import main as status_main
from pumpd.daemon.client import printable
from pumpd.daemon.cluster_status import render_members
from pumpd.daemon.membership import member_id
from pumpd.testing.localnode import LocalNode, find_free_port

from amqp_helpers import SteadyPublisher, drain_queue
from daemon_helpers import Daemon, pumpd_daemon, shovel_def

__all__ = ["pumpd_daemon"]

SHOVELS = 9
PREFETCH = 50


def _config(node_a: LocalNode, vhost_a: str, node_b: LocalNode, vhost_b: str) -> dict[str, Any]:
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    return {
        "cluster": {"name": "g", "coordination_uri": src, "lease_retry": 0.5,
                    "poll_interval": 0.5, "settle": 2, "grace": 3},
        "shovels": {f"s{i}": shovel_def(src, f"in{i}", dst, f"out{i}", reconnect_delay=1,
                                        prefetch_count=PREFETCH)
                    for i in range(SHOVELS)},
    }


def _member(start_daemon: Callable[..., Daemon], doc: dict[str, Any], name: str) -> Daemon:
    """A member with its own files (configuration, state, token), all its positions in one
    worker process (three daemons of nine processes each would crowd the test machine)."""
    d = start_daemon(doc["shovels"], "--shovels-per-process", str(SHOVELS), start=False)
    d.config_path = d.workdir / f"{name}.json"
    d.state_path = d.workdir / f"{name}.runtime.json"
    d.token_path = d.workdir / f"{name}.runtime.token"
    d.config_path.write_text(json.dumps(doc))
    return d


def _ident(d: Daemon) -> str:
    return member_id(str(d.state_path))


def _rows(node: LocalNode, *args: str) -> list[list[str]]:
    out = node.ctl(*args, "-q", "--no-table-headers")
    return [line.split("\t") for line in out.splitlines() if line]


def _consumers_by_queue(node: LocalNode, vhost: str) -> dict[str, list[str]]:
    """For each queue, the member of every consumer on it (the name of its connection), read
    from the broker: consumer -> its channel -> its connection -> the connection's name."""
    channels = dict(_rows(node, "list_channels", "pid", "connection"))
    names: dict[str, str] = {}
    for pid, props in _rows(node, "list_connections", "pid", "client_properties"):
        m = re.search(r'"connection_name","pumpd [^"]* member ([^" ]+)', props)
        names[pid] = m.group(1) if m else "?"
    out: dict[str, list[str]] = {}
    for queue, channel in _rows(node, "list_consumers", "-p", vhost, "queue_name",
                                "channel_pid"):
        out.setdefault(queue, []).append(names.get(channels.get(channel, ""), "?"))
    return out


def _spread(node: LocalNode, vhost: str, members: list[str]) -> dict[str, int] | None:
    """Positions per member when every source queue has exactly one consumer and the loads
    are 3 +- 1 over ``members``; None otherwise."""
    consumers = _consumers_by_queue(node, vhost)
    holders = [consumers.get(f"in{i}", []) for i in range(SHOVELS)]
    if any(len(h) != 1 for h in holders):
        return None
    load = Counter(h[0] for h in holders)
    share = SHOVELS // len(members)
    if set(load) - set(members) or any(abs(load[m] - share) > 1 for m in members):
        return None
    return dict(load)


def _wait_spread(node: LocalNode, vhost: str, members: list[str], timeout: float,
                 what: str) -> dict[str, int]:
    """The spread once it held at two checks in a row (a check takes a few rabbitmqctl
    calls: about a second or more)."""
    deadline = time.monotonic() + timeout
    last: dict[str, int] | None = None
    while time.monotonic() < deadline:
        now = _spread(node, vhost, members)
        if now is not None and now == last:
            return now
        last = now
        time.sleep(0.5)
    raise AssertionError(f"{what}: no even spread within {timeout}s: "
                         f"{_consumers_by_queue(node, vhost)}")


def _every_source_consumed_once(node: LocalNode, vhost: str, gone: str,
                                timeout: float) -> float:
    """The monotonic time at which every source queue had exactly one consumer again, none of
    them of member ``gone``."""
    deadline = time.monotonic() + timeout
    while True:
        by_queue = _consumers_by_queue(node, vhost)
        holders = [by_queue.get(f"in{i}", []) for i in range(SHOVELS)]
        if all(len(h) == 1 and h[0] != gone for h in holders):
            return time.monotonic()
        assert time.monotonic() < deadline, f"not every source consumed once: {by_queue}"
        time.sleep(0.2)


def _taken_over_after(killed: float, others: list[Daemon], shovels: list[str]) -> float:
    """Seconds from ``killed`` (wall clock) until the last of ``shovels`` was running on one of
    ``others``, from their logs (the broker's lists, read with rabbitmqctl, take seconds each
    on a loaded machine: too coarse for the time; they said who consumes)."""
    def at(event: dict[str, Any]) -> float:
        when = datetime.strptime(event["time"], "%Y-%m-%dT%H:%M:%S.%fZ")
        return when.replace(tzinfo=timezone.utc).timestamp()

    running = [(e["shovel"], at(e)) for d in others for e in d.log_events()
               if e.get("shovel") in shovels and e["message"].endswith(": running")]
    firsts = [min((t for s, t in running if s == name and t >= killed), default=None)
              for name in shovels]
    assert None not in firsts, f"not running after the kill: {shovels}, {firsts}"
    return max(t for t in firsts if t is not None) - killed


def _sources_empty(node: LocalNode, vhost: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        rows = dict(_rows(node, "list_queues", "-p", vhost, "name", "messages"))
        left = {q: n for q, n in rows.items() if q.startswith("in") and n != "0"}
        if not left:
            return
        assert time.monotonic() < deadline, f"the sources still hold {left}"
        time.sleep(0.5)


def test_status_warns_when_the_members_definitions_differ() -> None:
    member = {"host": "h", "pid": 1, "endpoint": None, "held": 3, "slot": 0}
    doc = {"cluster": "g", "me": "a", "joined": True, "coordination_uri": "amqp://x",
           "members": [{**member, "id": "a", "definitions": "1111"},
                       {**member, "id": "b", "definitions": "2222"}],
           "definitions_agree": False}
    text = render_members(doc, printable)
    assert "a (this one)" in text and "2222" in text
    assert "warning: the members' shovel definitions differ" in text
    assert "warning" not in render_members({**doc, "definitions_agree": True}, printable)


def test_three_members_spread_nine_shovels_one_consumer_each_and_refuse_runtime_changes(
        pumpd_daemon, node_a: LocalNode, vhost_a: str, node_b: LocalNode,
        vhost_b: str, capsys: pytest.CaptureFixture[str]) -> None:
    doc = _config(node_a, vhost_a, node_b, vhost_b)
    members = [_member(pumpd_daemon, doc, n) for n in ("a", "b", "c")]
    for d in members:
        d.start()
    ids = [_ident(d) for d in members]
    assert len(set(ids)) == 3
    _wait_spread(node_a, vhost_a, ids, 90, "three members")

    a = members[0]
    cluster = a.wait_for(lambda: (c := a.get("/api/cluster")) and len(c["members"]) == 3
                         and c, 15, "three members in the view")
    assert {m["id"] for m in cluster["members"]} == set(ids)
    assert cluster["definitions_agree"] and cluster["cluster"] == "g"
    assert all(m["endpoint"].startswith("http://127.0.0.1:") for m in cluster["members"])
    assert a.request("GET", "/api/cluster", auth=False)[0] == 401  # a read like the others

    # status: each worker names the member that runs it, the one the broker says
    consumers = _consumers_by_queue(node_a, vhost_a)

    def holders_as_the_broker_says() -> dict[str, Any] | None:
        workers = {s["name"]: s["workers"][0] for s in a.shovels()}
        same = all(workers[f"s{i}"]["holder"] == consumers[f"in{i}"][0] for i in range(SHOVELS))
        return workers if same else None

    workers = a.wait_for(holders_as_the_broker_says, 10, "holders as the broker says")
    assert all(len(w["standby"]) == 2 for w in workers.values())
    metrics = a.request("GET", "/metrics")[1]
    assert metrics.count("pumpd_position_held{") == SHOVELS

    # pumpd status: a MEMBER column; --cluster: the members
    connect = ["--http", f"127.0.0.1:{a.port}", "--http-token-file", str(a.token_path)]
    assert status_main(connect) == 0
    table = capsys.readouterr().out
    assert "MEMBER" in table and all(i in table for i in ids)
    assert status_main(["--cluster", *connect]) == 0
    listed = capsys.readouterr().out
    assert "group g: 3 member(s)" in listed and all(i in listed for i in ids)
    assert "warning" not in listed

    # one set of definitions: run-time changes are refused, naming the group and the reload
    status, body = a.request("PUT", "/api/shovels/extra",
                             shovel_def(node_a.uri(vhost_a), "x", node_b.uri(vhost_b), "y"))
    assert status == 409, body
    assert "group 'g'" in body["reason"] and "SIGHUP" in body["reason"]
    assert _ident(a) in body["reason"]
    assert a.request("DELETE", "/api/shovels/s0")[0] == 409
    assert a.shovel("extra") is None

    # a member stops cleanly: it drains, leaves the group, and the others take its positions
    assert a.stop() == 0
    _wait_spread(node_a, vhost_a, ids[1:], 60, "after a stopped")


def test_a_member_killed_hands_its_positions_to_the_others_and_one_joining_takes_some_back(
        pumpd_daemon, node_a: LocalNode, vhost_a: str, node_b: LocalNode,
        vhost_b: str) -> None:
    doc = _config(node_a, vhost_a, node_b, vhost_b)
    members = [_member(pumpd_daemon, doc, n) for n in ("a", "b", "c")]
    for d in members:
        d.start()
    ids = [_ident(d) for d in members]
    _wait_spread(node_a, vhost_a, ids, 90, "three members")
    a, b, c = members
    with SteadyPublisher(node_a.uri(vhost_a), [f"in{i}" for i in range(SHOVELS)], 100) as pub:
        time.sleep(2)
        held_by_c = [q for q, who in _consumers_by_queue(node_a, vhost_a).items()
                     if who == [ids[2]]]
        killed = time.time()
        c.kill_everything()
        _every_source_consumed_once(node_a, vhost_a, ids[2], 60)
        _wait_spread(node_a, vhost_a, ids[:2], 30, "after kill -9 of c")
        took = _taken_over_after(killed, [a, b], [f"s{q[2:]}" for q in held_by_c])
        # c comes back (the same files: the same member id) and takes its share again,
        # handed over by a and b gracefully (drain, confirm, ack, release)
        c.start()
        _wait_spread(node_a, vhost_a, ids, 60, "c back")
        load = _spread(node_a, vhost_a, ids)
        time.sleep(2)
        sent = pub.stop()
    assert held_by_c
    assert took < 10, f"c's positions ran elsewhere only after {took:.1f}s"
    assert load is not None and load.get(ids[2], 0) >= 2
    handed = [e for d in (a, b) for e in d.log_events() if e.get("event") == "handover"]
    assert handed, "no graceful handover logged"
    _sources_empty(node_a, vhost_a)
    bodies: Counter[bytes] = Counter()
    for i in range(SHOVELS):
        bodies.update(m.body for m in drain_queue(node_b.uri(vhost_b), f"out{i}", None))
    assert set(bodies) == {b"%d" % i for i in range(sent)}, "lost messages"
    # duplicates: what c held unacknowledged when it was killed (a prefetch per position)
    assert sum(bodies.values()) - sent <= PREFETCH * SHOVELS


def test_without_its_coordination_broker_a_group_still_runs_every_position_once(
        pumpd_daemon, node_a: LocalNode, vhost_a: str, node_b: LocalNode,
        vhost_b: str) -> None:
    doc = _config(node_a, vhost_a, node_b, vhost_b)
    doc["cluster"]["coordination_uri"] = f"amqp://guest:guest@127.0.0.1:{find_free_port()}/"
    members = [_member(pumpd_daemon, doc, n) for n in ("a", "b")]
    for d in members:
        d.start()
    # nobody is in the group: each member takes what has been free for grace (3 s); the
    # leases let one of them have each position
    _every_source_consumed_once(node_a, vhost_a, "nobody", 60)
    time.sleep(3)
    by_queue = _consumers_by_queue(node_a, vhost_a)
    assert all(len(by_queue.get(f"in{i}", [])) == 1 for i in range(SHOVELS)), by_queue
    cluster = members[0].get("/api/cluster")
    assert not cluster["joined"] and cluster["error"]
