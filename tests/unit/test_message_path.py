"""The generic path's bookkeeping (``engine/message_path.py``'s PathLedger), with no endpoint:
what is buffered and in flight, which source settlements are written and in what order, the
undeliverable pauses, and the relay's counters. Each test runs on both confirm windows."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pumpd.amqp10.message import Message
from pumpd.dataplane.api import Delivered, Returned
from pumpd.dataplane.frames import ACK_MODE_NO_ACK, ACK_MODE_ON_CONFIRM, ACK_MODE_ON_PUBLISH
from pumpd.dataplane.properties import encode_hop
from pumpd.engine.endpoint import Incoming, Settlement
from pumpd.engine.message_path import BUFFER_BOUND, PathLedger, hop_fields, message_size

from tests.support.impls import IMPLEMENTATIONS, confirm_window_class

ACCEPT, REJECT, REQUEUE = Settlement.ACCEPT, Settlement.REJECT, Settlement.REQUEUE


@pytest.fixture(params=IMPLEMENTATIONS)
def Window(request: pytest.FixtureRequest) -> Any:
    return confirm_window_class(request.param)


def incoming(tag: int, body: bytes = b"body", redelivered: bool = False) -> Incoming:
    return Incoming(tag, redelivered,
                    Delivered(tag, redelivered, b"ex", b"rk", b"\x00\x00", body, ""))


def ledger(Window: Any, mode: int = ACK_MODE_ON_CONFIRM, **kw: Any) -> PathLedger:
    return PathLedger(ack_mode=mode, window_class=Window, **kw)


def forward_all(led: PathLedger, first_seq: int = 1) -> list[int]:
    """Forward everything forwardable; the destination numbers from ``first_seq``."""
    seqs = []
    while led.forwardable:
        seq = first_seq + led.published
        led.forwarded(led.take_next(), seq)
        seqs.append(seq)
    return seqs


def receive(led: PathLedger, *tags: int) -> None:
    for t in tags:
        assert led.received(incoming(t))


# -- on_confirm -----------------------------------------------------------------------------------


def test_accepted_messages_are_acked_in_one_range_from_the_oldest(Window: Any) -> None:
    led = ledger(Window, window=10)
    receive(led, 1, 2, 3, 4, 5)
    assert led.buffered == 5
    assert forward_all(led) == [1, 2, 3, 4, 5]
    assert (led.buffered, led.in_flight, led.published) == (0, 5, 5)
    assert led.take_ranges() == []
    led.settled(1, 5, ACCEPT)
    assert led.pending_acks == 5 and led.has_settlements()
    assert led.take_ranges() == [(1, 5, ACCEPT)]
    assert (led.acked, led.confirmed, led.in_flight, led.pending_acks) == (5, 5, 0, 0)
    assert not led.has_settlements()


def test_a_range_waits_for_the_oldest_confirm(Window: Any) -> None:
    led = ledger(Window)
    receive(led, 1, 2, 3)
    forward_all(led)
    led.settled(2, 2, ACCEPT)
    led.settled(3, 3, ACCEPT)
    assert led.take_ranges() == []  # acking 3 with multiple would ack 1
    led.settled(1, 1, ACCEPT)
    assert led.take_ranges() == [(1, 3, ACCEPT)]


def test_destination_numbers_from_any_start_and_may_repeat_a_range(Window: Any) -> None:
    led = ledger(Window)
    receive(led, 7, 8, 9)
    assert forward_all(led, first_seq=0) == [0, 1, 2]
    led.settled(0, 1, ACCEPT)
    led.settled(0, 2, ACCEPT)  # 0 and 1 again: they stay as they were
    assert led.take_ranges() == [(7, 9, ACCEPT)]
    assert (led.confirmed, led.acked) == (3, 3)


def test_settlements_outside_what_was_forwarded_are_ignored(Window: Any) -> None:
    led = ledger(Window)
    assert not led.settled(1, 3, ACCEPT)  # nothing forwarded yet
    receive(led, 1)
    forward_all(led)
    led.settled(0, 99, ACCEPT)
    assert led.take_ranges() == [(1, 1, ACCEPT)]
    assert led.confirmed == 1


def test_a_destination_that_skips_a_number_is_refused(Window: Any) -> None:
    led = ledger(Window)
    receive(led, 1, 2)
    led.forwarded(led.take_next(), 1)
    with pytest.raises(RuntimeError, match="consecutive"):
        led.forwarded(led.take_next(), 3)


def test_a_requeued_message_is_requeued_alone_before_the_range_covering_its_tag(
        Window: Any) -> None:
    led = ledger(Window)
    receive(led, 1, 2, 3, 4)
    forward_all(led)
    led.settled(2, 2, REQUEUE)
    led.settled(1, 1, ACCEPT)
    led.settled(3, 4, ACCEPT)
    assert led.take_ranges() == [(2, 2, REQUEUE), (1, 4, ACCEPT)]
    assert (led.nacked, led.confirmed, led.acked, led.in_flight) == (1, 3, 3, 0)
    assert not led.paused


def test_a_rejected_message_pauses_for_the_policy_and_holds_back_later_acks(
        Window: Any) -> None:
    led = ledger(Window)
    receive(led, 1, 2, 3, 4, 5)
    forward_all(led)
    led.settled(1, 2, ACCEPT)
    assert led.settled(3, 3, REJECT) is True
    assert led.in_flight == 2  # 4 and 5: the destination settled 3
    assert led.paused and led.take_ranges() == [(1, 2, ACCEPT)]
    led.settled(4, 5, ACCEPT)
    # 4 and 5 are accepted, but one multiple ack for them would cover 3
    assert not led.has_settlements() and led.pending_acks == 0
    assert led.take_ranges() == []
    view = led.take_undeliverable()
    assert view is not None
    assert (view.delivery_tag, view.exchange, view.routing_key, view.body) == (3, b"ex", b"rk",
                                                                              b"body")
    assert view.reason == "rejected by the destination"
    led.resume()  # the policy parked it and acked 3 on its own
    assert not led.paused
    assert led.take_ranges() == [(4, 5, ACCEPT)]
    assert (led.nacked, led.acked) == (1, 4)


def test_acks_due_when_a_message_is_rejected_are_written_first(Window: Any) -> None:
    led = ledger(Window)
    receive(led, 1, 2, 3)
    forward_all(led)
    led.settled(1, 1, ACCEPT)
    led.settled(2, 2, REJECT)
    assert led.pending_acks == 1 and led.has_settlements()
    assert led.take_ranges() == [(1, 1, ACCEPT)]


def test_several_rejected_messages_are_held_in_order(Window: Any) -> None:
    led = ledger(Window)
    receive(led, 1, 2, 3, 4)
    forward_all(led)
    assert led.settled(1, 4, REJECT)  # one basic.nack(multiple) for all four
    tags = []
    while led.paused:
        view = led.take_undeliverable()
        assert view is not None
        tags.append(view.delivery_tag)
        led.resume()
    assert tags == [1, 2, 3, 4]
    assert led.take_undeliverable() is None
    assert led.take_ranges() == [] and led.in_flight == 0


def test_stopping_on_a_rejected_message_never_acks_past_it(Window: Any) -> None:
    led = ledger(Window)
    receive(led, 1, 2, 3, 4)
    forward_all(led)
    led.settled(2, 2, REJECT)
    led.settled(1, 1, ACCEPT)
    led.settled(3, 4, ACCEPT)
    led.hold_rest()  # the stop policy
    led.resume()
    assert led.take_ranges() == [(1, 1, ACCEPT)]
    assert led.in_flight == 0  # nothing left for a drain to wait for
    receive_after = led.received(incoming(5))
    assert receive_after is False and led.buffered == 0
    assert led.take_ranges() == []


def test_an_unforwardable_message_pauses_before_it_and_acks_before_it_still_flow(
        Window: Any) -> None:
    led = ledger(Window)
    receive(led, 1, 2, 3, 4)
    led.forwarded(led.take_next(), 1)
    led.forwarded(led.take_next(), 2)
    led.unforwardable(led.take_next(), "content header of 9000 bytes exceeds the frame_max")
    assert led.paused and not led.forwardable and led.buffered == 1
    assert (led.consumed, led.bytes) == (3, 12)  # the relay counts none it cannot forward
    led.settled(1, 2, ACCEPT)
    assert led.take_ranges() == [(1, 2, ACCEPT)]  # nothing after 3 went: these cannot cover it
    view = led.take_undeliverable()
    assert view is not None and view.delivery_tag == 3 and "frame_max" in view.reason
    led.resume()
    assert forward_all(led, 1) == [3]
    led.settled(3, 3, ACCEPT)
    # from 4: 3 was settled by the policy
    assert led.take_ranges() == [(4, 4, ACCEPT)]


def test_a_range_starts_after_tags_the_policy_settled(Window: Any) -> None:
    led = ledger(Window)
    receive(led, 1, 2, 3)
    led.unforwardable(led.take_next(), "malformed")
    led.resume()
    forward_all(led)
    led.settled(1, 2, ACCEPT)
    assert led.take_ranges() == [(2, 3, ACCEPT)]


# -- returns --------------------------------------------------------------------------------------


RETURNED = Returned(312, "NO_ROUTE", b"ex", b"rk", b"\x00\x00", b"body")


def test_a_returned_message_is_only_counted_without_hold_returns(Window: Any) -> None:
    led = ledger(Window)
    receive(led, 1)
    forward_all(led)
    assert led.returned_message(RETURNED) is False
    led.settled(1, 1, ACCEPT)
    assert led.take_ranges() == [(1, 1, ACCEPT)] and led.returned == 1


def test_a_held_return_holds_back_acks_until_the_policy_settled_it(Window: Any) -> None:
    led = ledger(Window, hold_returns=True)
    receive(led, 1, 2, 3)
    forward_all(led)
    led.settled(1, 1, ACCEPT)
    assert led.returned_message(RETURNED) is True
    assert led.destination_paused and led.take_returned() == RETURNED
    led.settled(2, 3, ACCEPT)  # RabbitMQ confirms a returned message after the return
    assert led.take_ranges() == [(1, 1, ACCEPT)]
    led.resume_destination()
    assert not led.destination_paused and led.take_returned() is None
    assert led.take_ranges() == [(2, 3, ACCEPT)]


def test_forwarding_goes_on_while_the_destination_side_is_paused(Window: Any) -> None:
    led = ledger(Window, hold_returns=True)
    receive(led, 1)
    forward_all(led)
    led.returned_message(RETURNED)
    receive(led, 2)
    assert led.forwardable  # as the relay: only the destination's reading stops


# -- the other ack modes, the limit, the counters -------------------------------------------------


def test_on_publish_acks_what_was_forwarded(Window: Any) -> None:
    led = ledger(Window, ACK_MODE_ON_PUBLISH)
    receive(led, 1, 2, 3)
    assert led.take_ranges() == []
    led.forwarded(led.take_next(), 1)
    led.forwarded(led.take_next(), 2)
    assert led.pending_acks == 2
    assert led.settled(1, 2, ACCEPT) is False  # nothing to confirm in this mode
    assert led.take_ranges() == [(1, 2, ACCEPT)]
    forward_all(led)
    assert led.take_ranges() == [(3, 3, ACCEPT)]
    assert (led.acked, led.in_flight, led.confirmed) == (3, 0, 0)


def test_no_ack_settles_nothing(Window: Any) -> None:
    led = ledger(Window, ACK_MODE_NO_ACK)
    receive(led, 1, 2)
    forward_all(led)
    led.settled(1, 2, ACCEPT)
    assert led.take_ranges() == [] and not led.has_settlements()
    assert (led.published, led.acked, led.in_flight) == (2, 0, 0)


def test_the_limit_holds_later_deliveries_uncounted(Window: Any) -> None:
    led = ledger(Window, limit=2)
    receive(led, 1, 2)
    assert led.limit_reached
    assert not led.received(incoming(3))
    assert (led.consumed, led.buffered) == (2, 2)
    forward_all(led)
    led.settled(1, 2, ACCEPT)
    assert led.take_ranges() == [(1, 2, ACCEPT)]


def test_counters_count_as_the_relay_does(Window: Any) -> None:
    led = ledger(Window, keep_last=True)
    led.received(incoming(1, b"abc", redelivered=True))
    led.received(incoming(2, b"defgh"))
    assert (led.consumed, led.redelivered, led.bytes) == (2, 1, 8)
    assert led.last_message is None
    forward_all(led)
    last = led.last_message
    assert last is not None and last.delivery_tag == 2 and last.body == b"defgh"


def test_unknown_ack_mode_is_refused(Window: Any) -> None:
    with pytest.raises(ValueError, match="ack mode 7"):
        ledger(Window, 7)


def test_the_buffer_bound_is_a_count_of_messages() -> None:
    assert BUFFER_BOUND > 0


# -- helpers ----------------------------------------------------------------------------------------


def test_hop_fields_read_the_encoded_hop_back() -> None:
    fields = [("shovelled-by", "pumpd@host"), ("shovel-name", "s"), ("src-uri", "amqp://h:1/v")]
    assert hop_fields(encode_hop(fields)) == tuple(fields)
    assert hop_fields(None) == ()
    with pytest.raises(ValueError, match="not a string"):
        hop_fields(b"\x00\x00\x00\x04\x01kt\x01")  # {"k": true}


def test_message_size_counts_bodies() -> None:
    assert message_size(incoming(1, b"12345").message) == 5
    assert message_size(Message(body=[b"ab", b"cde"])) == 5
    assert message_size(Message(body=[], raw=b"\x00Sw\xa1\x01x")) == 6


# -- the settlements written, against a model of the source ----------------------------------------


class ModelSource:
    """What a 0-9-1 source does with the path's settlements: a range of more than one settles
    every unsettled tag up to its last and must start at the oldest; one tag alone must be
    unsettled. Each tag the path settles must be one the destination's outcome allows."""

    def __init__(self) -> None:
        self.unsettled: list[int] = []
        self.outcome: dict[int, Settlement] = {}
        self.accepted: set[int] = set()  # by the destination
        self.requeue: set[int] = set()  # handed back by the destination
        self.returned: list[int] = []  # returned, not yet settled by the policy (in order)

    def settle(self, first: int, last: int, how: Settlement) -> None:
        if first == last:
            assert first in self.unsettled, f"tag {first} settled twice"
            covered = [first]
        else:
            assert first == min(self.unsettled), (first, self.unsettled)
            covered = [t for t in self.unsettled if t <= last]
        for tag in covered:
            if how == ACCEPT:
                assert tag in self.accepted, f"tag {tag} acked, the destination did not accept it"
                assert tag not in self.returned, f"tag {tag} acked before its return was parked"
            else:
                assert how == REQUEUE and tag in self.requeue, (tag, how)
            self.unsettled.remove(tag)
            self.outcome[tag] = how

    def policy_settles(self, tag: int) -> None:
        assert tag in self.unsettled
        self.unsettled.remove(tag)
        self.outcome[tag] = REJECT


# what the destination and the policy do, weighted
OPS = ["deliver"] * 3 + ["forward"] * 3 + ["settle"] * 3 + ["write"] * 2 + ["range", "return",
                                                                             "policy"]


@given(st.data())
def test_written_settlements_never_cover_a_message_the_destination_did_not_take(
        data: st.DataObject) -> None:
    Window = confirm_window_class("reference")
    hold_returns = data.draw(st.booleans())
    led = ledger(Window, window=data.draw(st.sampled_from([0, 1, 4])), hold_returns=hold_returns)
    source = ModelSource()
    first_seq = data.draw(st.sampled_from([0, 1, 2**40]))
    seq_tag: dict[int, int] = {}
    in_flight: list[int] = []  # destination sequence numbers not settled
    next_tag = 1
    ops = data.draw(st.lists(st.sampled_from(OPS), min_size=20, max_size=120))
    for op in ops:
        if op == "deliver":
            led.received(incoming(next_tag))
            source.unsettled.append(next_tag)
            next_tag += data.draw(st.integers(1, 3))  # tags grow, not always by one
        elif op == "forward" and led.forwardable:
            inc = led.take_next()
            if data.draw(st.integers(0, 9)) == 0:
                led.unforwardable(inc, "malformed")
            else:
                seq = first_seq + led.published
                led.forwarded(inc, seq)
                seq_tag[seq] = inc.tag
                in_flight.append(seq)
        elif op == "settle" and in_flight:
            seq = data.draw(st.sampled_from(in_flight))
            how = data.draw(st.sampled_from([ACCEPT, ACCEPT, ACCEPT, REQUEUE, REJECT]))
            in_flight.remove(seq)
            (source.accepted if how == ACCEPT else source.requeue if how == REQUEUE
             else set()).add(seq_tag[seq])
            led.settled(seq, seq, how)
        elif op == "range" and in_flight:
            last = data.draw(st.sampled_from(in_flight))
            for seq in [s for s in in_flight if s <= last]:
                in_flight.remove(seq)
                source.accepted.add(seq_tag[seq])
            led.settled(first_seq, last, ACCEPT)
        elif op == "return" and in_flight:
            # returned before its confirm: one in flight (its acceptance comes later)
            if hold_returns:
                source.returned.append(seq_tag[data.draw(st.sampled_from(in_flight))])
            led.returned_message(RETURNED)
        elif op == "write":
            for r in led.take_ranges():
                source.settle(*r)
        elif op == "policy":
            while led.paused:
                view = led.take_undeliverable()
                assert view is not None
                for r in led.take_ranges():  # what came before it goes first
                    source.settle(*r)
                source.policy_settles(view.delivery_tag)
                led.resume()
            while led.destination_paused:
                source.returned.pop(0)
                led.resume_destination()
    # the end: everything forwarded and accepted, the policy done
    while True:
        while led.paused:
            view = led.take_undeliverable()
            assert view is not None
            source.policy_settles(view.delivery_tag)
            led.resume()
        while led.destination_paused:
            source.returned.pop(0)
            led.resume_destination()
        if not led.forwardable:
            break
        inc = led.take_next()
        seq = first_seq + led.published
        led.forwarded(inc, seq)
        seq_tag[seq] = inc.tag
        in_flight.append(seq)
    for seq in in_flight:
        source.accepted.add(seq_tag[seq])
        led.settled(seq, seq, ACCEPT)
    for r in led.take_ranges():
        source.settle(*r)
    assert source.unsettled == []
    assert led.in_flight == 0 and led.pending_acks == 0
    assert led.acked == sum(1 for how in source.outcome.values() if how == ACCEPT)
