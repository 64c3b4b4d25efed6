"""A group of daemons on a real coordination broker (a private node): the probes that tell a
free queue from a held one, member leases and the view, member records, pause markers.

Every group here polls every 0.2 s; the waits are generous bounds (how fast a member's loss
shows is measured in bench/, not asserted here)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest
import uvloop
from pumpd.config.model import BrokerURI
from pumpd.config.uri import parse_uri
from pumpd.engine.link import Link, LinkError, open_link
from pumpd.engine.parameters import to_pika_parameters
from pumpd.engine.queue_names import info_queue, member_queue, paused_queue
from pumpd.group.members import Group
from pumpd.group.probes import Probes, QueueState, lease_is_free
from pumpd.group.spread import PositionKey
from pumpd.group.view import GroupView, MemberInfo
from pumpd.testing.localnode import LocalNode

from tests.support.amqp_helpers import declare_queue, queue_depth

T = TypeVar("T")


POLL = 0.2


WAIT = 20.0  # seconds: a bound for what takes a few polls


def run(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    loop = uvloop.new_event_loop()
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


async def connect(uri: BrokerURI, name: str = "pumpd test") -> Link:
    return await open_link(uri, to_pika_parameters(uri, client_name=name))


async def until(predicate: Callable[[], bool], what: str, timeout: float = WAIT) -> float:
    """Wait for ``predicate``; the seconds it took."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"not within {timeout} s: {what}")
        await asyncio.sleep(0.02)
    return time.monotonic() - start


async def until_free(probes: Probes, queue: str, timeout: float = WAIT) -> float:
    """Wait until a passive declare of ``queue`` says free; the seconds it took."""
    start = time.monotonic()
    while (state := await probes.state(queue)) is not QueueState.FREE:
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{queue!r} still {state.value} after {timeout} s")
        await asyncio.sleep(0.02)
    return time.monotonic() - start


def member(ident: str, endpoint: str | None = None) -> MemberInfo:
    return MemberInfo(ident, host="test-host", pid=os.getpid(), endpoint=endpoint,
                      started=time.time())


def group(uri: BrokerURI, ident: str, cluster: str = "g", **kw: Any) -> Group:
    return Group([uri], cluster, member(ident, f"http://127.0.0.1:1/{ident}"),
                 poll_interval=POLL, **kw)


def ids(view: GroupView) -> set[str]:
    return set(view.ids())


async def close_all(*things: Group | Link | Probes) -> None:
    for t in things:
        await t.close()


def test_a_passive_declare_tells_free_from_held_from_there(node_a: LocalNode,
                                                           vhost_a: str) -> None:
    uri = parse_uri(node_a.uri(vhost_a))
    declare_queue(node_a.uri(vhost_a), "shared")

    async def main() -> None:
        holder, prober = await connect(uri), await connect(uri)
        probes = Probes(prober)
        try:
            assert await Probes(holder).claim("lease")
            assert await probes.state("nothing") is QueueState.FREE
            assert await probes.state("lease") is QueueState.HELD
            assert await probes.state("shared") is QueueState.THERE
            assert await Probes(holder).state("lease") is QueueState.THERE  # its own
            assert await lease_is_free(prober, "nothing")
            assert not await lease_is_free(prober, "lease")
            assert not await lease_is_free(holder, "lease")
            # a claim of a held queue is refused, of a shared one too; one's own again is fine
            assert not await probes.claim("lease")
            assert not await probes.claim("shared")
            assert await Probes(holder).claim("lease")
            # the refusals closed channels, never the link
            assert prober.is_open and holder.is_open
            # the lease goes with its connection: free for the others as soon as the broker
            # has reaped it. The broker answers close-ok before the queue process has seen
            # its owner go (it deletes the exclusive queue on the owner's DOWN), so a probe
            # right after close() may still be told 405: poll, within a bound.
            await holder.close()
            await until_free(probes, "lease")
            assert await probes.claim("lease")
        finally:
            await close_all(probes, holder, prober)

    run(main)


def test_requests_that_succeed_reuse_their_channel(node_a: LocalNode, vhost_a: str) -> None:
    uri = parse_uri(node_a.uri(vhost_a))
    declare_queue(node_a.uri(vhost_a), "shared")

    async def main() -> None:
        link = await connect(uri)
        probes = Probes(link, keep=2)
        try:
            opened: list[int] = []
            real = probes._open_channel

            async def counting() -> Any:
                ch = await real()
                opened.append(ch.channel_number)
                return ch

            probes._open_channel = counting  # type: ignore[method-assign]
            for _ in range(5):
                assert await probes.state("shared") is QueueState.THERE
            assert len(opened) == 1
            # each 404 closes its channel: the first takes the kept one, the next open theirs
            for _ in range(3):
                assert await probes.state("missing") is QueueState.FREE
            assert len(opened) == 3
            assert await probes.state("shared") is QueueState.THERE
            assert len(opened) == 4
            # many at once: one channel each, and all answered
            states = await asyncio.gather(*(probes.state(f"missing-{i}") for i in range(40)))
            assert set(states) == {QueueState.FREE}
        finally:
            await close_all(probes, link)

    run(main)


def test_a_last_value_record_is_read_and_left_in_place(node_a: LocalNode,
                                                       vhost_a: str) -> None:
    uri = parse_uri(node_a.uri(vhost_a))
    args = {"x-max-length": 1, "x-overflow": "drop-head", "x-queue-type": "classic"}

    async def main() -> None:
        link = await connect(uri)
        probes = Probes(link)
        try:
            assert await probes.read_last("not-there") is None
            assert await probes.declare("record", arguments=args) == 0
            assert await probes.read_last("record") is None  # empty: get-empty, no hang
            for i in range(3):
                link.channel.basic_publish(exchange="", routing_key="record",
                                           body=f"v{i}".encode())
            await until(lambda: queue_depth(node_a.uri(vhost_a), "record")[0] == 1,
                        "the record queue holds one message")
            for _ in range(3):
                assert await probes.read_last("record") == b"v2"
            # a reader holding the record while a new one comes: the new one stays, the
            # old one, put back, is pushed out
            held = await probes._channel()
            got: list[int] = []
            held.basic_get(queue="record", auto_ack=False,
                           callback=lambda _c, m, _p, _b: got.append(m.delivery_tag))
            await until(lambda: bool(got), "the record is held")
            link.channel.basic_publish(exchange="", routing_key="record", body=b"v3")
            await asyncio.sleep(0.2)
            held.basic_reject(delivery_tag=got[0], requeue=True)
            await until(lambda: queue_depth(node_a.uri(vhost_a), "record")[0] == 1,
                        "one record again")
            assert await probes.read_last("record") == b"v3"
            # the reject is settled apart from the channel's next request (the broker's
            # delegate): the record is back a moment later, not at once
            await until(lambda: queue_depth(node_a.uri(vhost_a), "record")[0] == 1,
                        "the record back after the read")
            # another's arguments: refused, said so
            with pytest.raises(LinkError) as refused:
                await probes.declare("record", arguments={"x-max-length": 2})
            assert refused.value.reply_code == 406
            assert link.is_open
        finally:
            await close_all(probes, link)

    run(main)


def test_a_group_connection_asks_the_broker_for_its_heartbeat_unless_its_uri_sets_one(
        node_a: LocalNode, vhost_a: str) -> None:
    async def main() -> None:
        plain = Group([parse_uri(node_a.uri(vhost_a))], "g", member("plain"),
                      poll_interval=POLL, heartbeat=3)
        own = Group([parse_uri(node_a.uri(vhost_a) + "?heartbeat=7")], "g", member("own"),
                    poll_interval=POLL, heartbeat=3)
        try:
            for g in (plain, own):
                g.start()
                await g.wait_joined(WAIT)
            rows = await asyncio.to_thread(node_a.ctl, "list_connections", "-q",
                                           "--no-table-headers", "client_properties", "timeout")
            timeouts = {}
            for line in rows.splitlines():
                props, timeout = line.rsplit("\t", 1)
                for name in ("plain", "own"):
                    if f'"pumpd group g member {name}"' in props:
                        timeouts[name] = int(timeout)
            assert timeouts == {"plain": 3, "own": 7}
        finally:
            await close_all(plain, own)

    run(main)


def test_three_members_see_each_other_and_their_records(node_a: LocalNode,
                                                        vhost_a: str) -> None:
    uri = parse_uri(node_a.uri(vhost_a))

    async def main() -> None:
        groups = [group(uri, f"member-{i}") for i in range(3)]
        try:
            for g in groups:
                g.start()
                await g.wait_joined(WAIT)  # one after the other: slots 0, 1, 2
            everyone = {"member-0", "member-1", "member-2"}
            await until(lambda: all(ids(g.view) == everyone for g in groups),
                        "every member sees all three")
            assert [g.view.my_slot for g in groups] == [0, 1, 2]
            # every member, from its own view, decides the same spread: 10 positions each
            positions = [PositionKey(f"shovel-{i}", 0) for i in range(30)]
            decided = [g.view.preferred(positions) for g in groups]
            assert decided[0] == decided[1] == decided[2]
            assert sorted(list(decided[0].values()).count(m) for m in everyone) == [10] * 3
            view = groups[0].view
            assert [(m.slot, m.id) for m in view.members] == [
                (0, "member-0"), (1, "member-1"), (2, "member-2")]
            other = view.member("member-2")
            assert other is not None and other.info is not None
            assert other.info.endpoint == "http://127.0.0.1:1/member-2"
            assert other.info.pid == os.getpid() and other.info.host == "test-host"
            # what a member runs reaches the others at a later poll, in the order it took
            # them (the sticky spread keeps the oldest), each once
            groups[2].set_positions([PositionKey("orders", 1), PositionKey("orders", 0),
                                     PositionKey("orders", 1)])

            def sees_positions() -> bool:
                m = groups[0].view.member("member-2")
                return m is not None and m.info is not None and m.info.positions == (
                    PositionKey("orders", 1), PositionKey("orders", 0))

            await until(sees_positions, "member-0 sees member-2's positions")
            # one record each on the broker (a reader may hold one for a moment: waited for)
            for k in range(3):
                await until(lambda k=k: queue_depth(node_a.uri(vhost_a),
                                                    info_queue("g", k))[0] == 1,
                            f"slot {k}'s record in its queue")
        finally:
            await close_all(*groups)

    run(main)


def test_a_member_whose_connection_ends_leaves_every_view_and_its_slot_is_reused(
        node_a: LocalNode, vhost_a: str) -> None:
    uri = parse_uri(node_a.uri(vhost_a))

    async def main() -> None:
        a, b, c = group(uri, "a"), group(uri, "b"), group(uri, "c")
        d = group(uri, "d")
        try:
            for g in (a, b, c):
                g.start()
                await g.wait_joined(WAIT)
            await until(lambda: ids(a.view) == ids(c.view) == {"a", "b", "c"}, "all three")
            changes: list[GroupView] = []
            a.on_change(changes.append)
            # b's connection is cut from under it (as a dead process's is): its slot goes
            b_conn = b._conn
            assert b_conn is not None
            b_conn.link.abort()
            await until(lambda: ids(a.view) == ids(c.view) == {"a", "c"}, "b gone")
            # (b reconnects a second later: the views passed through one without its slot)
            assert [0, 2] in [[m.slot for m in v.members] for v in changes]
            # b reconnects by itself and claims the lowest free slot again: its own
            await until(lambda: ids(a.view) == {"a", "b", "c"}, "b back")
            assert b.view.my_slot == 1
            await b.close()
            await until(lambda: ids(a.view) == {"a", "c"}, "b closed")
            # a newcomer takes the freed slot: 1, not 3
            d.start()
            view = await d.wait_joined(WAIT)
            assert view.my_slot == 1
            await until(lambda: ids(c.view) == {"a", "c", "d"}, "d seen")
            # its record, not b's, is what the others show for slot 1
            slot1 = next(m for m in c.view.members if m.slot == 1)
            assert slot1.id == "d"
        finally:
            await close_all(a, b, c, d)

    run(main)


def test_a_member_whose_slot_queue_is_deleted_claims_one_again(node_a: LocalNode,
                                                               vhost_a: str) -> None:
    uri = parse_uri(node_a.uri(vhost_a))

    async def main() -> None:
        a, b = group(uri, "a"), group(uri, "b")
        try:
            for g in (a, b):
                g.start()
                await g.wait_joined(WAIT)
            probes = Probes(b._conn.link) if b._conn else None
            assert probes is not None
            # an operator deletes a's lease from under its connection: a no longer holds slot 0
            # and must not go on believing it does (another member could claim it): at its
            # next poll it sees its slot free, and claims the lowest free slot again, 0
            await asyncio.to_thread(node_a.ctl, "delete_queue", "-p", vhost_a,
                                    member_queue("g", 0))
            start = time.monotonic()
            while await probes.state(member_queue("g", 0)) is not QueueState.HELD:
                assert time.monotonic() - start < WAIT, "a did not claim slot 0 again"
                await asyncio.sleep(0.05)
            assert a.view.my_slot == 0
            await until(lambda: b.view.ids() == {"a", "b"}, "b sees a again")
        finally:
            await close_all(a, b)

    run(main)


MEMBER_SCRIPT = """
import asyncio, os, sys, time
import uvloop
from pumpd.config.uri import parse_uri
from pumpd.group.members import Group
from pumpd.group.view import MemberInfo

async def main():
    g = Group([parse_uri(sys.argv[1])], "g", MemberInfo("killed", "h", os.getpid()),
              poll_interval=0.2)
    g.start()
    view = await g.wait_joined(30)
    print(view.my_slot, flush=True)
    await asyncio.sleep(3600)

uvloop.run(main())
"""


def test_a_member_killed_with_sigkill_leaves_the_others_views(node_a: LocalNode,
                                                              vhost_a: str) -> None:
    uri = parse_uri(node_a.uri(vhost_a))
    proc = subprocess.Popen([sys.executable, "-c", MEMBER_SCRIPT, node_a.uri(vhost_a)],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        slot = int(proc.stdout.readline())

        async def main() -> None:
            a, b = group(uri, "a"), group(uri, "b")
            try:
                for g in (a, b):
                    g.start()
                    await g.wait_joined(WAIT)
                await until(lambda: ids(a.view) == ids(b.view) == {"a", "b", "killed"},
                            "the three members")
                assert slot == 0 and a.view.my_slot == 1 and b.view.my_slot == 2
                os.kill(proc.pid, signal.SIGKILL)
                took = await until(lambda: ids(a.view) == ids(b.view) == {"a", "b"},
                                   "the killed member gone")
                # the socket closed with the process: gone at the next poll or so
                # (a bound, not a measurement: bench/ measures)
                assert took < WAIT
                probes = Probes(a._conn.link) if a._conn else None
                assert probes is not None
                assert await probes.state(member_queue("g", 0)) is QueueState.FREE
            finally:
                await close_all(a, b)

        run(main)
    finally:
        proc.kill()
        proc.wait()


def test_groups_of_other_names_do_not_see_each_other(node_a: LocalNode, vhost_a: str) -> None:
    uri = parse_uri(node_a.uri(vhost_a))

    async def main() -> None:
        a, b = group(uri, "a", cluster="one"), group(uri, "b", cluster="two")
        try:
            for g in (a, b):
                g.start()
                await g.wait_joined(WAIT)
            await asyncio.sleep(3 * POLL)
            assert ids(a.view) == {"a"} and ids(b.view) == {"b"}
            assert a.view.my_slot == b.view.my_slot == 0
        finally:
            await close_all(a, b)

    run(main)


def test_when_every_slot_is_held_a_member_waits_outside(node_a: LocalNode,
                                                        vhost_a: str) -> None:
    uri = parse_uri(node_a.uri(vhost_a))

    async def main() -> None:
        a, b = group(uri, "a", max_members=1), group(uri, "b", max_members=1)
        try:
            a.start()
            await a.wait_joined(WAIT)
            b.start()
            await until(lambda: ids(b.view) == {"a"}, "b sees a")
            assert not b.view.joined
            await a.close()
            view = await b.wait_joined(WAIT)
            assert view.my_slot == 0 and view.ids() == {"b"}
        finally:
            await close_all(a, b)

    run(main)


def test_a_group_without_its_broker_is_not_joined_and_says_why(node_a: LocalNode,
                                                               vhost_a: str) -> None:
    # a port nobody listens on, then the real broker: the list fails over at once
    dead = parse_uri("amqp://guest:guest@127.0.0.1:1/")
    uri = parse_uri(node_a.uri(vhost_a))

    async def main() -> None:
        lone = Group([dead], "g", member("lone"), poll_interval=POLL)
        pair = Group([dead, uri], "g", member("pair"), poll_interval=POLL)
        try:
            lone.start()
            pair.start()
            await until(lambda: lone.last_error is not None, "lone failed to connect")
            assert not lone.view.joined and lone.view.members == ()
            with pytest.raises(LinkError, match="not connected"):
                await lone.pause("orders")
            view = await pair.wait_joined(WAIT)
            assert view.ids() == {"pair"}
        finally:
            await close_all(lone, pair)

    run(main)


def test_pause_markers_round_trip_across_members(node_a: LocalNode, vhost_a: str) -> None:
    uri = parse_uri(node_a.uri(vhost_a))

    async def main() -> None:
        a, b = group(uri, "a"), group(uri, "b")
        try:
            for g in (a, b):
                g.start()
                await g.wait_joined(WAIT)
            names = ["orders", "billing", "x" * 300]
            assert await b.paused(names) == frozenset()
            await a.pause("orders")
            await a.pause("orders")  # twice: still one marker
            await a.pause("x" * 300)
            assert await b.paused(names) == {"orders", "x" * 300}
            await b.resume("orders")
            await b.resume("billing")  # not paused: nothing to do
            assert await a.paused(names) == {"x" * 300}
            assert await a.paused([]) == frozenset()
        finally:
            await close_all(a, b)

    run(main)
    # the marker is a durable queue: it outlives the members that set it
    assert queue_depth(node_a.uri(vhost_a), paused_queue("g", "x" * 300)) == (0, 0)

