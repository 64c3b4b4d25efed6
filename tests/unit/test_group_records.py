"""What a group's members agree on without a broker: group names, member records, the view of
who is preferred and who runs a position, and the coordination connection's heartbeat."""

from __future__ import annotations

import os
import time
from dataclasses import replace

import pytest
from pumpd.config.cluster import check_cluster_name, coordination_heartbeat
from pumpd.config.uri import parse_uri
from pumpd.group.members import Group
from pumpd.group.spread import PositionKey, assign
from pumpd.group.view import GroupView, Member, MemberInfo


def member(ident: str, endpoint: str | None = None) -> MemberInfo:
    return MemberInfo(ident, host="test-host", pid=os.getpid(), endpoint=endpoint,
                      started=time.time())


def ids(view: GroupView) -> set[str]:
    return set(view.ids())


def test_cluster_names_are_letters_digits_underscores_and_dashes() -> None:
    assert check_cluster_name("a-b_1") is None
    assert "no dots" in (check_cluster_name("a.b") or "")
    assert check_cluster_name("") is not None
    with pytest.raises(ValueError, match="no dots"):
        Group([parse_uri("amqp://h")], "a.b", MemberInfo("m", "h", 1))


def test_a_member_record_round_trips_and_bad_ones_are_refused() -> None:
    info = MemberInfo("m1", "h", 12, "http://h:1", (PositionKey("a", 0), PositionKey("b", 2)),
                      5.0, "ab12")
    assert MemberInfo.from_json(info.to_json()) == info
    for bad in (b"[]", b"{}", b'{"id": "m", "host": "h", "pid": true}',
                b'{"id": "m", "host": "h", "pid": 1, "definitions": 7}',
                b'{"id": "m", "host": "h", "pid": 1, "positions": [["a"]]}',
                b'{"id": "m", "host": "h", "pid": 1, "endpoint": 3}', b"not json"):
        with pytest.raises(ValueError):
            MemberInfo.from_json(bad)


def test_a_view_names_the_preferred_member_and_who_runs_a_position() -> None:
    a = MemberInfo("a", "h", 1, positions=(PositionKey("s", 0),))
    b = MemberInfo("b", "h", 2)
    view = GroupView("g", "a", 0, (Member(0, a), Member(1, b), Member(2, None)))
    positions = [PositionKey("s", i) for i in range(4)]
    assert view.ids() == {"a", "b"}  # slot 2's record not read yet: not counted
    # sticky to what the records say each member runs
    assert view.held() == {"a": (PositionKey("s", 0),), "b": ()}
    assert view.preferred(positions) == assign(["a", "b"], positions, view.held())
    assert view.preferred(positions)[PositionKey("s", 0)] == "a"
    assert [m.id for m in view.runners(PositionKey("s", 0))] == ["a"]
    assert view.runners(PositionKey("s", 1)) == ()
    assert GroupView("g", "a").preferred(positions) == {}
    twice = GroupView("g", "a", 0, (Member(0, a), Member(1, replace(b, id="a"))))
    assert twice.duplicate_ids() == {"a"} and twice.ids() == {"a"}
    assert twice.member("a") == Member(0, a)


def test_the_coordination_connection_asks_for_half_the_smallest_source_heartbeat() -> None:
    coordination = parse_uri("amqp://h/")
    sources = [parse_uri("amqp://a/?heartbeat=30"), parse_uri("amqp://b/?heartbeat=5"),
               parse_uri("amqp://c/?heartbeat=0"), parse_uri("amqp://d/")]
    assert coordination_heartbeat(coordination, sources) == 2
    assert coordination_heartbeat(coordination, sources[:1]) == 15
    assert coordination_heartbeat(coordination, [parse_uri("amqp://a/?heartbeat=1")]) == 1
    # no source sets one (or all turn them off): the broker's proposal, as for the sources
    assert coordination_heartbeat(coordination, sources[2:]) is None
    assert coordination_heartbeat(coordination, []) is None
    # the coordination URI's own wins
    assert coordination_heartbeat(parse_uri("amqp://h/?heartbeat=60"), sources) == 60

