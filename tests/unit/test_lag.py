"""The lag of a position (engine/lag.py) and where its figures go: counters, slots, the status
document, the table and the Prometheus text."""

from __future__ import annotations

import struct

import pika
import pika.spec
import pytest
from pumpd.cli.client import render_table
from pumpd.dataplane.api import Delivered
from pumpd.dataplane.frames import ACK_MODE_ON_CONFIRM
from pumpd.dataplane.properties import encode_properties
from pumpd.engine.endpoint import Incoming, Settlement
from pumpd.engine.lag import Lag, message_timestamp, path_figures
from pumpd.engine.message_path import PathLedger
from pumpd.engine.status import Counters, State, lag_seconds
from pumpd.supervisor.definitions import parse_runtime
from pumpd.supervisor.report import ShovelView, WorkerView, metrics_text, shovel_doc
from pumpd.supervisor.slots import SlotRecord

from tests.support.impls import confirm_window_class, relay_class
from tests.support.pika_wire import deliver_frames, method

SESSION = object()


def tick(lag: Lag, now: float, *, empty: bool = True, received: int = 0, held: int = 0,
         published: int | None = None, ts: int | None = None,
         session: object = SESSION, reading: tuple[float, int] | None = None) -> float | None:
    lag.sample(now, session=session, source_empty=empty, received=received, held=held,
               published=received if published is None else published, last_timestamp=ts,
               reading=reading)
    return lag.seconds(now)


def test_unknown_until_first_caught_up_then_zero_while_caught_up() -> None:
    lag = Lag()
    assert lag.seconds(100.0) is None
    assert tick(lag, 100.0, empty=False, received=5, held=5) is None  # a backlog, no timestamps
    assert tick(lag, 101.0, received=10, held=0) == 0.0
    assert tick(lag, 102.0, received=12, held=0) == 0.0


def test_behind_since_the_last_caught_up_tick_while_nothing_is_forwarded() -> None:
    lag = Lag()
    tick(lag, 100.0, received=10)
    # the destination stops confirming: held grows, the source fills up
    assert tick(lag, 101.0, empty=False, received=15, held=5) == 1.0
    assert tick(lag, 130.0, empty=False, received=15, held=5) == 30.0
    lag.idle()  # the session failed: still behind since 100
    assert lag.seconds(140.0) == 40.0
    assert tick(lag, 141.0, empty=True, received=0, held=0, session=object()) == 0.0


def test_a_busy_position_that_keeps_up_is_behind_by_a_tick_at_most() -> None:
    lag = Lag()
    received = 0
    for i in range(20):  # never idle at a tick: always 100 held, all older ones confirmed
        received += 1000
        seconds = tick(lag, 100.0 + i * 0.25, received=received, held=100)
        if i:
            assert seconds == 0.25
    assert lag.since == pytest.approx(100.0 + 18 * 0.25)


def test_a_mark_is_covered_only_once_as_many_were_forwarded() -> None:
    lag = Lag()
    tick(lag, 100.0, received=0)  # caught up at 100
    tick(lag, 101.0, received=50, held=50)  # mark (101, 50)
    assert tick(lag, 102.0, received=80, held=31) == 2.0  # 49 forwarded: 101 not covered
    assert tick(lag, 103.0, received=80, held=30) == 2.0  # 50 forwarded: covered up to 101


def test_no_mark_while_the_source_has_a_backlog() -> None:
    lag = Lag()
    tick(lag, 100.0)
    tick(lag, 101.0, empty=False, received=50, held=10)
    assert tick(lag, 102.0, empty=False, received=100, held=10) == 2.0


def test_a_busy_queue_never_read_empty_is_covered_by_its_readings() -> None:
    lag = Lag()
    tick(lag, 100.0)  # caught up once
    # every reading finds 12 ready: never "empty", but what it counted gets forwarded
    received = 0
    for i in range(1, 5):
        received += 5000
        asked = 100.0 + 5 * i - 0.1
        tick(lag, 100.0 + 5 * i, empty=False, received=received, held=100,
             reading=(asked, received - 20 + 12))
    # 19,900 forwarded cover the reading asked at 114.9 (14,992), not the one at 119.9 (19,992)
    assert lag.seconds(120.0) == pytest.approx(5.1)
    received += 5000
    assert tick(lag, 125.0, empty=False, received=received, held=100) == pytest.approx(5.1)


def test_a_reading_mark_dominated_by_a_later_tick_mark_is_dropped() -> None:
    lag = Lag()
    tick(lag, 100.0)
    tick(lag, 102.0, received=50, held=50)  # (102, 50)
    tick(lag, 103.0, received=60, held=60, reading=(101.0, 70))  # says less than (102, 50)
    assert tick(lag, 104.0, received=60, held=10) == 2.0  # 50 forwarded: up to 102


def test_a_full_list_of_marks_moves_its_newest_and_is_never_early() -> None:
    lag = Lag(marks=2)
    tick(lag, 100.0)
    tick(lag, 101.0, received=10, held=10)
    tick(lag, 102.0, received=20, held=20)
    tick(lag, 103.0, received=30, held=30)  # replaces (102, 20) by (103, 30)
    assert tick(lag, 104.0, received=30, held=10) == 3.0  # (101, 10) covered, not 103
    assert tick(lag, 105.0, received=40, held=10) == 1.0  # (103, 30) and (104, 30) covered


def test_the_timestamp_of_a_confirmed_message_counts_once_it_is_confirmed() -> None:
    lag = Lag()
    # a backlog from the start: no caught-up instant, only timestamps
    assert tick(lag, 1000.0, empty=False, received=10, held=5, published=10, ts=900) is None
    # 10 published by the last tick, now 10 forwarded: the one stamped 900 is confirmed
    assert tick(lag, 1001.0, empty=False, received=20, held=10, published=20, ts=950) == 101.0
    assert tick(lag, 1002.0, empty=False, received=20, held=0, published=20, ts=950) == 52.0
    # a later caught-up instant wins over an older timestamp
    assert tick(lag, 1003.0, received=20, held=0, published=20, ts=950) == 0.0
    assert tick(lag, 1010.0, empty=False, received=25, held=5, published=25, ts=1009) == 7.0


def test_a_clock_ahead_in_a_timestamp_reads_as_caught_up_never_negative() -> None:
    lag = Lag()
    assert tick(lag, 1000.0, empty=False, received=1, held=0, published=1, ts=2000) == 0.0


def test_unknown_forgets_everything() -> None:
    lag = Lag()
    tick(lag, 100.0)
    lag.unknown()
    lag.idle()
    assert lag.seconds(200.0) is None


def test_a_new_session_starts_its_marks_afresh() -> None:
    lag = Lag()
    tick(lag, 100.0)
    tick(lag, 101.0, received=1000, held=10)  # mark (101, 1000) of the first session
    # the second session counts from 0: the old mark must not be compared with its counts
    assert tick(lag, 102.0, received=5, held=5, session=object()) == 2.0
    assert lag.since == 100.0


def test_a_stream_reading_holds_until_the_next_and_ticks_do_not_move_it() -> None:
    lag = Lag()
    tick(lag, 100.0, received=10)  # caught up by the rule of a source that counts nothing
    lag.stream_reading(40, 90.0)  # 40 behind, the first of them written at 90
    assert lag.seconds(100.0) == 10.0
    # nothing held at a tick is no sign of being caught up: the stream's end says otherwise
    assert tick(lag, 105.0, received=10, held=0) == 15.0
    lag.idle()  # the destination failed: what the reading said still holds
    assert lag.seconds(130.0) == 40.0
    lag.stream_reading(60, 90.0)  # more behind, the same first one: older by the clock only
    assert lag.seconds(150.0) == 60.0
    lag.stream_reading(0, None)  # nothing behind: caught up
    assert lag.seconds(160.0) == 0.0
    assert tick(lag, 161.0, empty=False, received=20, held=5) == 0.0


def test_a_stream_reading_without_a_chunk_time_is_unknown_and_a_failed_one_falls_back() -> None:
    lag = Lag()
    tick(lag, 100.0, received=10)
    lag.stream_reading(3, None)
    assert lag.seconds(101.0) is None
    lag.stream_unread()  # the streams port went away: covered up to the last caught-up tick
    assert lag.seconds(110.0) == 10.0
    assert tick(lag, 111.0, received=10, held=0) == 0.0
    lag.stream_reading(5, 100.0)
    lag.unknown()  # paused: everything forgotten, the next tick goes by the rules
    assert lag.seconds(112.0) is None
    assert tick(lag, 113.0, received=0, held=0, session=object()) == 0.0
    with pytest.raises(ValueError, match="behind must be at least 0"):
        lag.stream_reading(-1, None)


def test_marks_must_be_positive() -> None:
    with pytest.raises(ValueError, match="marks must be at least 1, not 0"):
        Lag(marks=0)


def test_message_timestamp_reads_the_basic_property() -> None:
    assert message_timestamp(encode_properties({"timestamp": 1_700_000_000})) == 1_700_000_000
    assert message_timestamp(encode_properties({"content_type": "text/plain"})) is None
    assert message_timestamp(b"\x00") is None  # truncated: unreadable, not an error
    assert message_timestamp(struct.pack(">H", 1 << (15 - 9)) + b"\x00") is None


def test_workers_combine_to_the_one_behind_longest() -> None:
    def c(ms: int) -> Counters:
        return Counters(lag_since_ms=ms, lag_messages=ms // 1000)

    assert c(-1).add(c(0)).lag_since_ms == 0
    assert c(0).add(c(5000)).lag_since_ms == 5000
    assert c(9000).add(c(5000)).lag_since_ms == 5000
    assert c(-1).add(c(-1)).lag_since_ms == -1
    assert c(9000).add(c(5000)).lag_messages == 9
    assert c(5000).carry(c(9000)).lag_since_ms == 5000  # a gauge: the live process's


def test_lag_seconds_is_measured_at_the_reader() -> None:
    assert lag_seconds(Counters(), 10.0) is None
    assert lag_seconds(Counters(lag_since_ms=0), 10.0) == 0.0
    assert lag_seconds(Counters(lag_since_ms=4_500), 10.0) == 5.5
    assert lag_seconds(Counters(lag_since_ms=20_000), 10.0) == 0.0


def test_the_lag_round_trips_through_a_slot() -> None:
    for messages, since in ((-1, -1), (0, 0), (12, 1_700_000_000_123)):
        record = SlotRecord(pid=1, counters=Counters(lag_messages=messages, lag_since_ms=since))
        again = SlotRecord.unpack(record.pack()).counters
        assert (again.lag_messages, again.lag_since_ms) == (messages, since)


def _view(*counters: Counters) -> ShovelView:
    cfg = parse_runtime("orders", {"src-uri": "amqp://h", "src-queue": "q",
                                   "dest-uri": "amqp://h", "dest-queue": "out"},
                        len(counters), "test").cfg
    workers = [WorkerView(index=i, pid=10 + i, alive=True, stopping=False,
                          record=SlotRecord(pid=10 + i, state=State.RUNNING, counters=c),
                          restarts=0, last_exit=None, next_start_in=None, heartbeat_age=0.1,
                          counters=c, moving=True)
               for i, c in enumerate(counters)]
    return ShovelView(name="orders", cfg=cfg, origin="runtime", removing=False,
                      state=State.RUNNING, reason="", since=1.0, workers=workers)


def test_the_figures_reach_the_document_the_table_and_the_metrics() -> None:
    now = 1_700_000_100.0
    v = _view(Counters(lag_messages=40, lag_since_ms=1_700_000_070_000),
              Counters(lag_messages=-1, lag_since_ms=-1))
    import pumpd.supervisor.report as report

    doc = {**shovel_doc(v), **report.plugin_figures(v.counters, None, now)}
    assert (doc["lag_messages"], doc["lag_seconds"]) == (40, 30.0)
    workers = [report.plugin_figures(w.counters, None, now) for w in v.workers]
    assert [(w["lag_messages"], w["lag_seconds"]) for w in workers] == [(40, 30.0),
                                                                       (None, None)]
    assert "30.0 s (40 msgs)" in render_table([doc]).splitlines()[1]
    text = metrics_text([v], "native", now=now)
    assert "# TYPE pumpd_lag_messages gauge" in text
    assert "# TYPE pumpd_lag_seconds gauge" in text
    assert 'pumpd_lag_messages{shovel="orders",worker="0"} 40' in text
    assert 'pumpd_lag_seconds{shovel="orders",worker="0"} 30.0' in text
    assert 'worker="1"} ' not in "\n".join(
        line for line in text.splitlines() if line.startswith("pumpd_lag_"))


def test_the_native_relay_and_the_generic_path_give_the_same_figures(impl: str) -> None:
    """Both paths, keeping their last message, read alike at a tick: published, in flight,
    confirmed; the timestamp is that of the last message published."""
    relay = relay_class(impl)(source_channel=1, dest_channel=1, dest_frame_max=131072,
                              ack_mode=ACK_MODE_ON_CONFIRM, window=100, keep_last=True)
    ledger = PathLedger(ack_mode=ACK_MODE_ON_CONFIRM, window_class=confirm_window_class(impl),
                        keep_last=True)
    assert path_figures(relay) == path_figures(ledger) == (0, 0, 0, None)
    for tag in (1, 2, 3):
        props = encode_properties({"timestamp": 1_000 + tag})
        relay.feed_source(b"".join(deliver_frames(tag, b"m", props, channel=1)))
        ledger.received(Incoming(tag, False, Delivered(tag, False, b"ex", b"rk", props, b"m",
                                                       "")))
    relay.take_publishes()
    while ledger.forwardable:
        ledger.forwarded(ledger.take_next(), ledger.published + 1)
    assert path_figures(relay) == path_figures(ledger) == (3, 3, 3, 1_003)
    relay.feed_destination(method(1, pika.spec.Basic.Ack(delivery_tag=2, multiple=True)))
    ledger.settled(1, 2, Settlement.ACCEPT)
    assert path_figures(relay) == path_figures(ledger) == (3, 1, 3, 1_003)
    relay.feed_destination(method(1, pika.spec.Basic.Ack(delivery_tag=3, multiple=False)))
    ledger.settled(3, 3, Settlement.ACCEPT)
    assert path_figures(relay) == path_figures(ledger) == (3, 0, 3, 1_003)
    lags = [Lag(), Lag()]
    for lag, path in zip(lags, (relay, ledger), strict=True):
        received, held, published, timestamp = path_figures(path)
        lag.sample(1_010.0, session=SESSION, source_empty=False, received=received, held=held,
                   published=published, last_timestamp=timestamp)
    assert lags[0].seconds(1_010.0) == lags[1].seconds(1_010.0) == 7.0
