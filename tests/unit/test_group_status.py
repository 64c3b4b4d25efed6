"""``pumpd status`` of a group member, without a broker: it warns when the members' definitions
differ."""

from __future__ import annotations

from pumpd.cli.client import printable
from pumpd.cli.group_status import render_members


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

