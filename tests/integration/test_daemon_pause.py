"""Pause and resume in the daemon, against real daemons and private nodes:
``POST /api/shovels/NAME/pause|resume`` and ``pumpd pause|resume NAME``. A paused shovel drains
what it holds and leaves every other message in its source, holds no consumer, stays paused
across a restart of the daemon (the state file) and a reload, and resumes moving everything,
nothing lost, nothing duplicated."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvloop
from pumpd import exitcodes
from pumpd.config.model import BrokerURI
from pumpd.config.uri import parse_uri
from pumpd.engine.link import LinkError
from pumpd.group.members import Group
from pumpd.group.view import MemberInfo
from pumpd.supervisor import statefile
from pumpd.supervisor.definitions import parse_runtime
from pumpd.supervisor.pauses import MarkersOnLoop, Pauses
from pumpd.supervisor.positions import Shovel
from pumpd.testing import TcpProxy
from pumpd.testing.localnode import LocalNode, find_free_port

from tests.support.amqp_helpers import declare_queue, drain_queue, queue_depth, via
from tests.support.daemon_helpers import (
    Daemon,
    fill_queue,
    named_shovel,
    running_state,
    settled,
    shovel_def,
)

NOWHERE = f"amqp://guest:guest@127.0.0.1:{find_free_port()}/%2F"  # nothing listens there


def pumpd(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """A ``pumpd`` command as a user runs it: the token found by itself (no flag, no env)."""
    env = {k: v for k, v in os.environ.items() if k != "PUMPD_TOKEN_FILE"}
    return subprocess.run([sys.executable, "-m", "pumpd", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, env=env)


@pytest.fixture
def slow_b(node_b: LocalNode) -> Iterator[TcpProxy]:
    # confirms take a 40 ms round trip: with a prefetch of 20 a backlog of 5000 takes ~10 s
    with TcpProxy("127.0.0.1", node_b.amqp_port, delay_ms=20) as p:
        yield p


def state_of(d: Daemon, name: str) -> str | None:
    doc = d.shovel(name)
    return doc["state"] if doc else None


def paused_in_state_file(d: Daemon) -> list[str]:
    if not d.state_path.exists():
        return []
    return list(json.loads(d.state_path.read_text()).get("paused", []))


def consumers_of(node: LocalNode, vhost: str, queue: str) -> list[str]:
    """The queue's consumers as the broker lists them (``rabbitmqctl list_consumers``)."""
    out = node.ctl("list_consumers", "-q", "--no-table-headers", "-p", vhost, "queue_name",
                   "consumer_tag")
    return [line for line in out.splitlines() if line.split("\t")[0] == queue]


def test_a_paused_shovel_keeps_its_backlog_across_a_restart_and_resume_moves_it_all(
    pumpd_daemon: Any, node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str,
    slow_b: TcpProxy,
) -> None:
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    n = 5000
    declare_queue(src, "p-in")
    fill_queue(src, "p-in", [b"%05d" % i for i in range(n)])
    d = pumpd_daemon({"p": shovel_def(src, "p-in", via(node_b, vhost_b, slow_b), "p-out",
                                      prefetch_count=20)})
    d.wait_for(lambda: d.shovel("p")["counters"]["acked"] >= 200, 60, "some moved")

    # unauthenticated: refused, nothing paused
    status, doc = d.request("POST", "/api/shovels/p/pause", auth=False)
    assert status == 401, doc
    status, doc = d.request("POST", "/api/shovels/p/pause")
    assert status == 202, doc
    assert doc["name"] == "p" and doc["paused"] is True and "drain" in doc["note"]
    assert paused_in_state_file(d) == ["p"]  # written before the answer
    d.wait_for(lambda: state_of(d, "p") == "paused", 60, "paused")
    status, doc = d.request("POST", "/api/shovels/p/pause")  # again: says so, changes nothing
    assert status == 200 and doc["note"] == "already paused: nothing changed", doc

    c = d.shovel("p")["counters"]
    acked = c["acked"]
    assert 200 <= acked < n, c  # paused with a backlog
    assert (c["confirmed"], c["in_flight"]) == (acked, 0), c  # what it held: delivered, acked
    ready, unacked, consumers = settled(node_a, vhost_a, "p-in")
    assert (ready, unacked, consumers) == (n - acked, 0, 0)
    assert consumers_of(node_a, vhost_a, "p-in") == []
    assert slow_b.connections == 0  # no connection to the destination either
    assert queue_depth(dst, "p-out")[0] == acked
    time.sleep(2)  # paused: nothing moves
    assert queue_depth(src, "p-in")[0] == n - acked
    assert state_of(d, "p") == "paused" and d.shovel("p")["counters"]["acked"] == acked

    # a restarted daemon (the same state file) starts it paused: it never connects
    d.signal(signal.SIGTERM)
    assert d.wait_exit(60) == 0
    d.start()
    d.wait_for(lambda: state_of(d, "p") == "paused", 30, "paused after the restart")
    time.sleep(1)
    assert settled(node_a, vhost_a, "p-in") == (n - acked, 0, 0)
    assert consumers_of(node_a, vhost_a, "p-in") == [] and slow_b.connections == 0
    assert d.shovel("p")["counters"]["consumed"] == 0 and d.shovel("p")["paused"] is True

    # resume with the command a user types: the token found by itself
    result = pumpd("resume", "p", "--http", f"127.0.0.1:{d.port}")
    assert result.returncode == exitcodes.OK, result.stderr
    assert result.stdout == "shovel 'p': resumed: its workers consume again\n"
    assert paused_in_state_file(d) == []
    d.wait_for(lambda: queue_depth(src, "p-in")[0] == 0
               and d.shovel("p")["counters"]["acked"] == n - acked, 120, "the rest moved")
    assert state_of(d, "p") == "running" and d.shovel("p")["paused"] is False
    # every message once: nothing was in flight at a failure, so no duplicate either
    bodies = [m.body for m in drain_queue(dst, "p-out", expected=n, timeout=30)]
    assert sorted(bodies) == [b"%05d" % i for i in range(n)]
    assert queue_depth(dst, "p-out")[0] == 0
    result = pumpd("resume", "p", "--http", f"127.0.0.1:{d.port}")
    assert (result.returncode, result.stdout) == (
        exitcodes.OK, "shovel 'p': already resumed: nothing changed\n")


def test_pause_by_name_refusals_reload_and_delete(pumpd_daemon: Any) -> None:
    d = pumpd_daemon({"fixed": shovel_def(NOWHERE, "in", NOWHERE, "out")})
    http = ("--http", f"127.0.0.1:{d.port}")
    status, doc = d.request("POST", "/api/shovels/nope/pause")
    assert (status, doc["reason"]) == (404, "no shovel 'nope'")
    status, doc = d.request("GET", "/api/shovels/fixed/pause")
    assert status == 405, doc
    result = pumpd("pause", "nope", *http)
    assert result.returncode == exitcodes.UNAVAILABLE and result.stdout == ""
    assert "HTTP 404" in result.stderr and "no shovel 'nope'" in result.stderr
    result = pumpd("pause", "--help")
    assert result.returncode == 0 and "stays in the source" in result.stdout

    # a shovel that cannot connect pauses too: it stops trying
    result = pumpd("pause", "fixed", *http)
    assert result.returncode == exitcodes.OK, result.stderr
    assert result.stdout.startswith("shovel 'fixed': paused: its workers drain what they hold")
    d.wait_for(lambda: state_of(d, "fixed") == "paused", 30, "paused")

    # a reload that changes it restarts its worker: the new one starts paused
    pid = d.shovel("fixed")["workers"][0]["pid"]
    d.write_config({"fixed": shovel_def(NOWHERE, "in", NOWHERE, "out", prefetch_count=7)})
    d.signal(signal.SIGHUP)
    d.wait_for(lambda: (doc := d.shovel("fixed")) and doc["prefetch_count"] == 7
               and doc["workers"][0]["pid"] not in (0, pid) and doc["state"] == "paused",
               30, "restarted by the reload, paused")
    assert paused_in_state_file(d) == ["fixed"]

    # a run-time shovel paused, then deleted: no longer paused; added again, it runs
    definition = {"src-uri": NOWHERE, "src-queue": "in", "dest-uri": NOWHERE, "dest-queue": "out"}
    assert d.request("PUT", "/api/shovels/rt", definition)[0] == 201
    assert d.request("POST", "/api/shovels/rt/pause")[0] == 202
    assert paused_in_state_file(d) == ["fixed", "rt"]
    d.wait_for(lambda: state_of(d, "rt") == "paused", 30, "rt paused")
    state = json.loads(d.state_path.read_text())
    assert list(state["shovels"]) == ["rt"]  # pausing kept the run-time shovels
    assert d.request("DELETE", "/api/shovels/rt")[0] == 204
    assert paused_in_state_file(d) == ["fixed"]
    d.wait_for(lambda: d.shovel("rt") is None, 30, "rt gone")
    assert d.request("PUT", "/api/shovels/rt", definition)[0] == 201
    d.wait_for(lambda: state_of(d, "rt") == "starting", 30, "rt trying to connect")
    assert json.loads(d.state_path.read_text())["paused"] == ["fixed"]  # a PUT kept the pause

    # status and metrics show paused, and a paused shovel is not a failure
    result = pumpd("status", *http)
    assert result.returncode == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if line.startswith("fixed "))
    assert row.split()[1] == "paused", result.stdout
    summary = json.loads(pumpd("status", "--json", *http).stdout)["summary"]
    assert summary["states"] == {"paused": 1, "starting": 1}, summary
    metrics = d.get("/metrics").splitlines()
    assert 'pumpd_shovel_state{shovel="fixed",state="paused"} 1' in metrics
    assert 'pumpd_worker_state{shovel="fixed",worker="0",state="paused"} 1' in metrics
    assert 'pumpd_shovel_state{shovel="fixed",state="terminated"} 0' in metrics


def test_an_old_state_file_without_pauses_is_read_as_none_paused(pumpd_daemon: Any) -> None:
    d = pumpd_daemon({}, start=False)
    definition = {"src-uri": NOWHERE, "src-queue": "in", "dest-uri": NOWHERE, "dest-queue": "out"}
    d.state_path.write_text(json.dumps({"shovels": {"old": definition}}))
    d.start()
    d.wait_for(lambda: state_of(d, "old") == "starting", 30, "the old shovel trying")
    assert d.request("POST", "/api/shovels/old/pause")[0] == 202
    assert json.loads(d.state_path.read_text()) == {"shovels": {"old": definition},
                                                     "paused": ["old"]}
    result = subprocess.run([sys.executable, "-m", "pumpd", "check", "--config",
                             str(d.state_path)], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr  # still a configuration pumpd reads


def test_a_pause_in_a_shared_process_touches_only_its_shovel(
    pumpd_daemon: Any, node_a: LocalNode, vhost_a: str,
) -> None:
    uri = node_a.uri(vhost_a)
    d = pumpd_daemon({name: named_shovel(uri, name) for name in ("a", "b")},
                     "--shovels-per-process", "2")
    d.wait_for(lambda: running_state(d, "a") and running_state(d, "b"), 30, "both running")
    (pid,) = set(d.worker_pids("a")) | set(d.worker_pids("b"))  # one process runs both
    assert d.request("POST", "/api/shovels/a/pause")[0] == 202
    d.wait_for(lambda: state_of(d, "a") == "paused", 30, "a paused")
    fill_queue(uri, "a-in", [b"a"] * 10)
    fill_queue(uri, "b-in", [b"b"] * 10)
    d.wait_for(lambda: queue_depth(uri, "b-out")[0] == 10, 30, "b moving")
    assert running_state(d, "b") and queue_depth(uri, "a-in")[0] == 10
    assert consumers_of(node_a, vhost_a, "a-in") == []
    assert d.request("POST", "/api/shovels/a/resume")[0] == 202
    d.wait_for(lambda: queue_depth(uri, "a-out")[0] == 10, 30, "a moved after the resume")
    assert d.worker_pids("a") == d.worker_pids("b") == [pid]  # the same process throughout


class NoProcesses:
    """The shovels below have no position: no control message is ever sent."""

    def send(self, proc: object, msg: tuple[object, ...]) -> bool:
        raise AssertionError(f"a control message with no position: {msg}")


def _member(uri: BrokerURI, cluster: str, name: str,
            tmp_path: Path) -> tuple[Group, Pauses, dict[str, Shovel], Path]:
    """A member of ``cluster`` (not started) with the shovels s and t, which have no position,
    and its pauses kept in its own state file."""
    g = Group([uri], cluster, MemberInfo(name, host="test-host", pid=os.getpid(),
                                         endpoint=None, started=time.time()),
              poll_interval=0.2)
    definition = {"src-uri": NOWHERE, "src-queue": "in", "dest-uri": NOWHERE, "dest-queue": "out"}
    shovels = {n: Shovel(n, parse_runtime(n, definition, None, "test")) for n in ("s", "t")}
    state = tmp_path / f"{name}.runtime.json"
    return g, Pauses(str(state), NoProcesses(), dict), shovels, state


def test_a_pause_is_group_wide_through_the_markers(node_a: LocalNode, vhost_a: str,
                                                   tmp_path: Path) -> None:
    uri = parse_uri(node_a.uri(vhost_a))

    def member(name: str) -> tuple[Group, Pauses, dict[str, Shovel], Path]:
        return _member(uri, "pg", name, tmp_path)

    def on_file(state: Path) -> list[str]:
        return list(json.loads(state.read_text()).get("paused", [])) if state.exists() else []

    async def main() -> None:
        ga, a, sa, state_a = member("a")
        gb, b, sb, state_b = member("b")
        try:
            for g in (ga, gb):
                g.start()
                await g.wait_joined(20)
            assert a.request(sa["s"], True)  # changed; asked of member a
            assert "s" in a and "s" not in b
            await b.sync(gb, sb)  # b reads the markers before a wrote its: nothing yet
            assert "s" not in b
            await a.sync(ga, sa)  # a writes its marker ...
            await b.sync(gb, sb)  # ... b follows it, into its own state file
            assert ("s" in b, "t" in b, on_file(state_b)) == (True, False, ["s"])
            assert await gb.paused(["s", "t"]) == {"s"}
            assert b.request(sb["s"], False)  # changed; resumed on member b
            await a.sync(ga, sa)  # a still sees the marker: b has not written yet; a keeps it
            assert "s" in a
            await b.sync(gb, sb)
            await a.sync(ga, sa)
            assert ("s" in a, on_file(state_a)) == (False, [])
            # a member that cannot reach the coordination broker keeps a pause asked of it,
            # and writes it once it can
            await ga.close()
            assert a.request(sa["t"], True)  # changed
            with pytest.raises(LinkError):
                await a.sync(ga, sa)
            assert "t" in a
            ga2, *_ = member("a2")
            ga2.start()
            await ga2.wait_joined(20)
            try:
                await a.sync(ga2, sa)
                await b.sync(gb, sb)
                assert "t" in b and await gb.paused(["s", "t"]) == {"t"}
            finally:
                await ga2.close()
        finally:
            await ga.close()
            await gb.close()

    uvloop.run(main())


def test_a_member_whose_state_file_cannot_be_written_still_follows_the_group(
    node_a: LocalNode, vhost_a: str, tmp_path: Path,
) -> None:
    """The group's markers keep a group-wide pause: a member whose state file is broken follows
    it in memory (logged at ERROR) and leaves the file alone; a pause asked of that member
    itself is refused, changing nothing; once the file is removed, the next change writes
    the pauses the member holds."""
    uri = parse_uri(node_a.uri(vhost_a))

    def member(name: str) -> tuple[Group, Pauses, dict[str, Shovel], Path]:
        return _member(uri, "pw", name, tmp_path)

    async def main() -> None:
        ga, a, sa, _ = member("a")
        gb, b, sb, state_b = member("b")
        try:
            for g in (ga, gb):
                g.start()
                await g.wait_joined(20)
            cut = '{"shovels": {}, "paused": ['  # an edit cut short
            state_b.write_text(cut)
            assert a.request(sa["s"], True)
            await a.sync(ga, sa)
            await b.sync(gb, sb)
            assert "s" in b and state_b.read_text() == cut
            with pytest.raises(statefile.StateFileError, match="not valid JSON"):
                b.request(sb["t"], True)
            assert "t" not in b and state_b.read_text() == cut
            state_b.unlink()
            assert b.request(sb["t"], True)
            assert json.loads(state_b.read_text())["paused"] == ["s", "t"]
        finally:
            await ga.close()
            await gb.close()

    uvloop.run(main())


def test_attached_members_follow_each_others_pauses(node_a: LocalNode, vhost_a: str,
                                                   tmp_path: Path) -> None:
    """As in the daemon (daemon/membership.py): the group on a uvloop thread of its own, the
    pauses on the coordinator's asyncio loop, through :class:`MarkersOnLoop`."""
    uri = parse_uri(node_a.uri(vhost_a))
    definition = {"src-uri": NOWHERE, "src-queue": "in", "dest-uri": NOWHERE, "dest-queue": "out"}
    group_loop = uvloop.new_event_loop()
    thread = threading.Thread(target=group_loop.run_forever, daemon=True)
    thread.start()

    def on_group_loop(request: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(request, group_loop).result(30)

    groups = [Group([uri], "pf", MemberInfo(name, host="test-host", pid=os.getpid(),
                                            endpoint=None, started=time.time()),
                    poll_interval=0.2) for name in ("a", "b")]
    for g in groups:
        group_loop.call_soon_threadsafe(g.start)
        on_group_loop(g.wait_joined(20))

    async def until(predicate: Any, what: str) -> None:
        deadline = time.monotonic() + 20
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"not within 20 s: {what}")
            await asyncio.sleep(0.05)

    async def main() -> None:
        members = []
        for g in groups:
            shovels = {"s": Shovel("s", parse_runtime("s", definition, None, "test"))}
            pauses = Pauses(str(tmp_path / f"{g.me.id}.runtime.json"), NoProcesses(), dict)
            pauses.attach(MarkersOnLoop(g, group_loop), lambda shovels=shovels: shovels,
                          interval=0.2)
            members.append((pauses, shovels))
        (a, sa), (b, sb) = members
        try:
            assert a.request(sa["s"], True)  # changed
            await until(lambda: "s" in b, "b paused by a's pause")
            assert b.request(sb["s"], False)  # changed
            await until(lambda: "s" not in a, "a resumed by b's resume")
        finally:
            for pauses, _ in members:
                await pauses.close()

    try:
        asyncio.run(main())
        assert on_group_loop(groups[0].paused(["s"])) == frozenset()
    finally:
        for g in groups:
            on_group_loop(g.close())
        group_loop.call_soon_threadsafe(group_loop.stop)
        thread.join(10)
        group_loop.close()

