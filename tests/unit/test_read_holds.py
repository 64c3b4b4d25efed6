"""ReadHolds: reading pauses with the first reason and resumes with the last one gone."""

from __future__ import annotations

from pumpd.dataplane.read_holds import ReadHolds


class Transport:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.closing = False

    def is_closing(self) -> bool:
        return self.closing

    def pause_reading(self) -> None:
        self.calls.append("pause")

    def resume_reading(self) -> None:
        self.calls.append("resume")


def test_the_transport_pauses_once_and_resumes_when_the_last_reason_goes() -> None:
    t, holds = Transport(), ReadHolds()
    assert not holds.hold(t, True, "write-pressure")
    assert not holds.hold(t, True, "buffer")
    assert not holds.hold(t, True, "buffer")
    assert holds and t.calls == ["pause"]
    assert not holds.hold(t, False, "write-pressure")
    assert holds.hold(t, False, "buffer")
    assert not holds and t.calls == ["pause", "resume"]
    assert not holds.hold(t, False, "buffer")  # dropping a reason that is not held: no change
    assert t.calls == ["pause", "resume"]


def test_a_closing_or_missing_transport_is_not_touched_but_the_reasons_are_kept() -> None:
    t, holds = Transport(), ReadHolds()
    t.closing = True
    holds.hold(t, True, "r")
    holds.hold(None, True, "s")
    assert holds and t.calls == []
