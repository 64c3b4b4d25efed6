"""The stall rule (engine/stall.py) on a fake clock: what is a stall, what is not, and when the
pump is asked for a backlog reading. The sessions it judges are tests/integration/test_stall.py's."""

from __future__ import annotations

from dataclasses import replace

from pumpd.engine.stall import StallRule
from pumpd.engine.status import Counters

T = 60.0  # the timeout of these tests


class Session:
    """A session's counters and backlog readings as the pump hands them to the rule."""

    def __init__(self, *, confirms: bool = True, backlog_ready: bool = True,
                 timeout: float = T) -> None:
        self.now = 1000.0
        self.rule = StallRule(timeout, self.now, confirms=confirms, backlog_ready=backlog_ready)
        self.c = Counters()

    def move(self, n: int = 1) -> None:
        """n messages consumed, published, confirmed and acked."""
        c = self.c
        self.c = replace(c, consumed=c.consumed + n, published=c.published + n,
                         confirmed=c.confirmed + n, acked=c.acked + n)

    def publish_unconfirmed(self, n: int) -> None:
        c = self.c
        self.c = replace(c, consumed=c.consumed + n, published=c.published + n,
                         in_flight=c.in_flight + n)

    def confirm(self, n: int) -> None:
        c = self.c
        self.c = replace(c, confirmed=c.confirmed + n, acked=c.acked + n,
                         in_flight=c.in_flight - n)

    def read(self, ready: int, took: float = 0.0) -> None:
        asked = self.now
        self.rule.reading_asked(asked)
        self.now += took
        self.rule.reading_answered(asked, ready)

    def tick(self, seconds: float, *, excused: bool = False) -> str | None:
        """Advance in checks 2 s apart (the pump's idle counter interval); the first stall's
        reason, or None."""
        end = self.now + seconds
        while self.now < end:
            self.now = min(self.now + 2.0, end)
            stall = self.rule.check(self.now, self.c, excused=excused)
            if stall is not None:
                return f"{stall.side}: {stall.reason}"
        return None


def test_a_backlog_with_nothing_moving_for_the_timeout_is_a_stall() -> None:
    s = Session()
    s.move(100)
    assert s.tick(2) is None
    s.read(12345)  # asked after the last movement
    assert s.tick(T - 2) is None  # not yet a whole timeout since the reading
    s.read(12345)
    assert s.tick(4) == "source: 12,345 ready at the source, nothing moved for 60 s"


def test_movement_restarts_the_clock() -> None:
    s = Session()
    s.tick(2)
    s.read(500)
    assert s.tick(T - 10) is None
    s.move()
    assert s.tick(20) is None  # the reading before the movement no longer counts
    s.read(500)
    assert s.tick(T - 2) is None
    assert s.tick(4) is not None


def test_a_reading_asked_before_the_last_movement_does_not_start_the_clock() -> None:
    s = Session()
    s.tick(2)
    asked = s.now
    s.rule.reading_asked(asked)
    s.move()
    s.tick(2)  # the movement is seen while the reading is out
    s.rule.reading_answered(asked, 10)
    assert s.tick(3 * T) is None


def test_an_empty_source_is_never_a_stall() -> None:
    s = Session()
    for _ in range(10):
        s.read(0)
        assert s.tick(T) is None


def test_a_backlog_that_empties_is_not_a_stall() -> None:
    """Another consumer of the source queue took the messages: the latest reading is what
    counts."""
    s = Session()
    s.tick(2)
    s.read(40)
    s.tick(T / 2)
    s.read(0)
    assert s.tick(2 * T) is None


def test_an_idle_shovel_that_sees_a_message_arrive_is_not_stalled_at_once() -> None:
    """Nothing moved for hours; a message arrives as the backlog is read: the clock starts at
    that reading, not at the last movement."""
    s = Session()
    s.move()
    s.tick(2)
    s.read(0)
    assert s.tick(5 * 3600) is None
    s.read(1)
    assert s.tick(2) is None
    s.move()  # the consumer got it
    assert s.tick(2 * T) is None


def test_outstanding_messages_without_a_confirm_are_a_destination_stall() -> None:
    s = Session()
    s.publish_unconfirmed(250)
    assert s.tick(T - 2) is None
    assert s.tick(4) == "destination: 250 messages unconfirmed by the destination for 60 s"


def test_confirms_that_trickle_in_are_not_a_stall() -> None:
    """A slow destination: each confirm restarts the destination's clock."""
    s = Session()
    s.publish_unconfirmed(100)
    for _ in range(10):
        assert s.tick(T - 10) is None
        s.confirm(1)
    assert s.tick(T - 4) is None


def test_without_confirms_outstanding_counts_nothing() -> None:
    """on_publish / no_ack: the destination confirms nothing, in_flight means nothing."""
    s = Session(confirms=False)
    s.publish_unconfirmed(10)
    assert s.tick(3 * T) is None


def test_the_clock_for_confirms_starts_when_messages_go_out() -> None:
    s = Session()
    assert s.tick(5 * T) is None  # nothing outstanding, nothing expected
    s.publish_unconfirmed(1)
    assert s.tick(T - 2) is None
    assert s.tick(4) is not None


def test_a_blocked_destination_is_never_a_stall() -> None:
    s = Session()
    s.publish_unconfirmed(100)
    s.read(5000)
    assert s.tick(10 * T, excused=True) is None
    # unblocked: a whole timeout again before anything counts
    assert s.tick(T - 2) is None
    assert s.tick(4) is not None


def test_a_source_that_does_not_answer_the_reading_is_a_stall() -> None:
    s = Session()
    s.move()
    s.tick(2)
    s.rule.reading_asked(s.now)  # never answered
    assert s.tick(T - 2) is None
    assert s.tick(4) == ("source: the source did not answer for 60 s (reading its backlog) "
                         "and nothing moved")


def test_a_slow_reading_while_messages_move_is_not_a_stall() -> None:
    s = Session()
    s.rule.reading_asked(s.now)
    for _ in range(3 * int(T)):
        s.move()
        assert s.tick(1) is None


def test_a_stream_source_counts_only_the_silence_and_the_confirms() -> None:
    """A stream's message count is what it retains: never a backlog waiting for us."""
    s = Session(backlog_ready=False)
    s.tick(2)
    s.read(1_000_000)
    assert s.tick(5 * T) is None
    assert not s.rule.reading_due(s.now)
    s.publish_unconfirmed(3)
    assert s.tick(T + 2) is not None


def test_zero_disables_the_rule() -> None:
    s = Session(timeout=0)
    s.publish_unconfirmed(10)
    s.read(10)
    s.rule.reading_asked(s.now)
    assert s.tick(100 * T) is None
    assert not s.rule.reading_due(s.now)


def test_a_reading_is_due_soon_after_movement_stops_then_to_confirm_a_backlog() -> None:
    s = Session()
    s.move()
    s.tick(2)
    s.read(0)
    s.move()
    s.tick(2)  # moved since the last reading, but only just
    assert not s.rule.reading_due(s.now)
    s.tick(2)
    assert not s.rule.reading_due(s.now)  # 2 s
    s.tick(2)  # nothing moved for 4 s, over 0.05 T (3 s): suspected
    assert s.rule.reading_due(s.now)
    s.rule.reading_asked(s.now)
    assert not s.rule.reading_due(s.now)  # one reading at a time
    s.rule.reading_answered(s.now, 70)
    assert not s.rule.reading_due(s.now)
    s.tick(T / 4)
    assert s.rule.reading_due(s.now)  # a backlog with nothing moving: read it again
    s.read(70)
    s.move()
    s.tick(2)
    assert not s.rule.reading_due(s.now)


def test_an_idle_shovel_is_not_read_more_often_than_usual() -> None:
    """Once a reading followed the last movement and found nothing, the rule asks for none:
    the pump's own schedule (every 5-30 s) goes on."""
    s = Session()
    s.move()
    s.tick(4)
    s.read(0)
    for _ in range(100):
        s.tick(2)
        assert not s.rule.reading_due(s.now)
