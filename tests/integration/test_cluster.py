"""A group of daemons with a coordination broker spreads its positions evenly, hands
them over gracefully, fails over when a member dies, and takes its shovels from the
configuration file only (``daemon/membership.py``).

Three real daemons (each its own HTTP port, state file and configuration file, as if on three
machines) run the same nine shovels against private nodes. Who consumes what is read from the
source broker's own lists (``rabbitmqctl list_consumers`` / ``list_channels`` /
``list_connections``: a pump's connections are named ``pumpd SHOVEL#I member ID``), never from
pumpd's status; how soon positions ran again is read from the members' logs (a rabbitmqctl list
takes seconds on a loaded machine). Intervals are short (poll 0.5 s, settle 2 s, grace 3 s) so
the group moves within seconds; bench/group_spread.py measures the default ones."""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pumpd.cli.client import main as status_main
from pumpd.group.spread import PositionKey, assign
from pumpd.supervisor.membership import member_id
from pumpd.testing.localnode import LocalNode, find_free_port

from tests.support.amqp_helpers import SteadyPublisher, drain_queue
from tests.support.daemon_helpers import Daemon, shovel_def
from tests.support.group_helpers import (
    freeze,
    group_member,
    iso,
    member_ident,
    process_tree,
    taken_over_after,
    wake,
)

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
    """A member with all its positions in one worker process (three daemons of nine processes
    each would crowd the test machine)."""
    return group_member(start_daemon, doc, name, "--shovels-per-process", str(SHOVELS))


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


def _sources_empty(node: LocalNode, vhost: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        rows = dict(_rows(node, "list_queues", "-p", vhost, "name", "messages"))
        left = {q: n for q, n in rows.items() if q.startswith("in") and n != "0"}
        if not left:
            return
        assert time.monotonic() < deadline, f"the sources still hold {left}"
        time.sleep(0.5)


def test_three_members_spread_nine_shovels_one_consumer_each_and_refuse_runtime_changes(
        pumpd_daemon, node_a: LocalNode, vhost_a: str, node_b: LocalNode,
        vhost_b: str, capsys: pytest.CaptureFixture[str]) -> None:
    doc = _config(node_a, vhost_a, node_b, vhost_b)
    members = [_member(pumpd_daemon, doc, n) for n in ("a", "b", "c")]
    for d in members:
        d.start()
    ids = [member_ident(d) for d in members]
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
    assert member_ident(a) in body["reason"]
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
    ids = [member_ident(d) for d in members]
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
        took = taken_over_after(killed, [a, b], [f"s{q[2:]}" for q in held_by_c])
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


SOURCE_HEARTBEAT = 5  # seconds, on the source URIs only (as the README advises)


def _default_timing_config(node_a: LocalNode, vhost_a: str, node_b: LocalNode,
                           vhost_b: str) -> dict[str, Any]:
    """Nine shovels whose source URIs set ``heartbeat=5``; the group's clause names only its
    coordination broker (no heartbeat on that URI): every other setting is the default."""
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    return {
        "cluster": {"name": "g", "coordination_uri": src},
        "shovels": {f"s{i}": shovel_def(f"{src}?heartbeat={SOURCE_HEARTBEAT}", f"in{i}", dst,
                                        f"out{i}", reconnect_delay=1, prefetch_count=PREFETCH)
                    for i in range(SHOVELS)},
    }


def _names_whose_leave_the_bounded_rule_alone_reshuffles(workdir: Path) -> tuple[list[str], int]:
    """Three member names (their ids hash their state files' paths) and the one to fail, such
    that the even rule without the records (``assign`` without ``held``) would move a position
    of a survivor when that member leaves: the case a sticky spread must hold still in."""
    positions = [PositionKey(f"s{i}", 0) for i in range(SHOVELS)]
    for k in range(200):
        names = [f"m{k}{c}" for c in "abc"]
        ids = [member_id(str(workdir / f"{n}.runtime.json")) for n in names]
        home = assign(ids, positions)
        for v, victim in enumerate(ids):
            without = assign([i for i in ids if i != victim], positions)
            if any(home[p] != victim and without[p] != home[p] for p in positions):
                return names, v
    raise AssertionError("no member set whose leave reshuffles: the rule changed?")


def _consumer_channels(node: LocalNode, vhost: str) -> dict[str, list[str]]:
    """For each queue, the channel pid of each consumer, as the broker lists them (a position
    that moved, even away and back, has another channel)."""
    out: dict[str, list[str]] = {}
    for queue, channel in _rows(node, "list_consumers", "-p", vhost, "queue_name",
                                "channel_pid"):
        out.setdefault(queue, []).append(channel)
    return out


def _running_on(members: list[Daemon], shovels: list[str]) -> bool:
    """Whether each of ``shovels`` runs on one of ``members``, as they report it (cheap: the
    broker's own lists, slower to read, confirm it after)."""
    running = {s["name"] for d in members for s in d.shovels() if s["state"] == "running"}
    return set(shovels) <= running


def _wait_reported_spread(members: list[Daemon], timeout: float, what: str) -> None:
    """Until the members report every shovel running on exactly one of them, 3 each, the same
    at two looks a second apart (their status: cheap; the broker's lists confirm it after)."""
    deadline = time.monotonic() + timeout
    last: list[set[str]] | None = None
    while True:
        now = [{s["name"] for s in d.shovels() if s["state"] == "running"} for d in members]
        even = (sorted(len(r) for r in now) == [SHOVELS // len(members)] * len(members)
                and set().union(*now) == {f"s{i}" for i in range(SHOVELS)})
        if even and now == last:
            return
        last = now if even else None
        assert time.monotonic() < deadline, f"{what}: not spread within {timeout}s: {now}"
        time.sleep(1)


def _one_consumer_each(node: LocalNode, vhost: str, queues: list[str],
                       timeout: float = 30) -> dict[str, str]:
    """Each queue's consumer channel, read from the broker once every queue has exactly one
    (one ``rabbitmqctl`` call a look: each takes seconds on a loaded machine)."""
    deadline = time.monotonic() + timeout
    while True:
        channels = _consumer_channels(node, vhost)
        if all(len(channels.get(q, [])) == 1 for q in queues):
            return {q: channels[q][0] for q in queues}
        assert time.monotonic() < deadline, f"not one consumer each: {channels}"
        time.sleep(0.5)


def _running(d: Daemon) -> set[str]:
    return {s["name"] for s in d.shovels() if s["state"] == "running"}


@pytest.mark.parametrize("fault", ["freeze", "kill"])
def test_a_member_frozen_or_killed_fails_over_within_the_source_heartbeat_and_no_healthy_position_moves(
        fault: str, pumpd_daemon, tmp_path: Path, node_a: LocalNode, vhost_a: str,
        node_b: LocalNode, vhost_b: str) -> None:
    doc = _default_timing_config(node_a, vhost_a, node_b, vhost_b)
    names, v = _names_whose_leave_the_bounded_rule_alone_reshuffles(tmp_path)
    members = [_member(pumpd_daemon, doc, n) for n in names]
    for d in members:
        d.start()
    victim, survivors = members[v], [d for i, d in enumerate(members) if i != v]
    queues = [f"in{i}" for i in range(SHOVELS)]
    _wait_reported_spread(members, 90, "three members")
    with SteadyPublisher(node_a.uri(vhost_a), queues, 30) as pub:
        its_shovels = sorted(_running(victim))
        victims = [f"in{s[1:]}" for s in its_shovels]
        healthy = [q for q in queues if q not in victims]
        # who consumes is the broker's word: one consumer on each queue, and its channel
        before = _one_consumer_each(node_a, vhost_a, queues)
        tree = process_tree(victim)
        faulted = time.time()
        if fault == "freeze":
            freeze(tree)
        else:
            victim.kill_everything()
        try:
            survivors[0].wait_for(lambda: _running_on(survivors, its_shovels), 60,
                                  f"the {fault} member's shovels running on the others")
            took = taken_over_after(faulted, survivors, its_shovels)
            during = _one_consumer_each(node_a, vhost_a, queues)
        finally:
            if fault == "freeze":
                wake(tree)
        returned = time.time()
        if fault == "kill":
            victim.start()  # the same files: the same member id
        # back in the group, it stays `settle` (10 s) before anything is handed to it, and then
        # gets back what the survivors took from it, nothing else
        victim.wait_for(lambda: _running_on([victim], its_shovels), 60,
                        f"its shovels running on the {fault} member again")
        _wait_reported_spread(members, 30, f"back after the {fault}")
        assert sorted(_running(victim)) == its_shovels
        after = _one_consumer_each(node_a, vhost_a, queues)
        sent = pub.stop()
    print(f"{fault}: the member's positions ran on the others {took:.1f}s after the {fault}")
    assert victims and took <= 3 * SOURCE_HEARTBEAT + 5, (
        f"the {fault} member's positions ran elsewhere only after {took:.1f}s")
    # the member's own queues got new consumers (the survivors', then its own again); the
    # survivors' kept theirs throughout: a position that moved, even away and back, has
    # another channel
    assert all(during[q] != before[q] != after[q] for q in victims), (before, during, after)
    moved = {q: (before[q], during[q], after[q]) for q in healthy
             if not before[q] == during[q] == after[q]}
    assert not moved, f"positions of healthy members changed consumer: {moved}"
    # while it is away the survivors may pass one of its positions between themselves (each
    # took what its own view preferred before their records agreed); what they hand back to it
    # is exactly what they took from it
    handovers = [e for d in survivors for e in d.log_events()
                 if e.get("event") == "handover" and e["time"] >= iso(faulted)]
    print(f"back at {iso(returned)}; handovers:",
          [(e["time"], e["shovel"], e.get("to")) for e in handovers])
    handed = [e for e in handovers if e.get("to") == member_ident(victim)]
    assert {f"in{e['shovel'][1:]}" for e in handed} == set(victims), handed
    # settle (10 s) counts from when a survivor first sees it back: after it came back
    assert all(e["time"] >= iso(returned + 10) for e in handed), (
        f"handed over before settle (back at {iso(returned)}): {handed}")
    _sources_empty(node_a, vhost_a)
    bodies: Counter[bytes] = Counter()
    for i in range(SHOVELS):
        bodies.update(m.body for m in drain_queue(node_b.uri(vhost_b), f"out{i}", None))
    assert set(bodies) == {b"%d" % i for i in range(sent)}, "lost messages"
    # duplicates: what the victim held unacknowledged when it stopped (a prefetch per position)
    assert sum(bodies.values()) - sent <= PREFETCH * len(victims)

