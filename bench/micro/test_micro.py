"""Micro-benchmarks: the pure-Python reference against the native extension.

Run: ``python -m pytest bench/micro -q --benchmark-only --benchmark-columns=min,median,mean``.
The per-message table at the end divides each timed call by the messages it handles.

- confirm window, steady state with ``window`` publishes outstanding: per message one ``add`` and
  one single ``ack`` of the oldest, ``take_ack`` every 100 (as a read of the destination socket
  would); and one ``add`` per message with a multiple ``ack`` + ``take_ack`` every 100. The native
  cost must not depend on the window (100 vs 100,000 within 20%).
- relay: ``feed_source`` of one buffer of 1,000 x 64 B deliveries + ``take_publishes``; and
  ``feed_destination`` of 1,000 single acks + ``take_source_output``, also with ``window``
  publishes outstanding (the confirm cost seen from the relay, with no Python call per message).

Window figures include the Python call overhead of driving the API from a Python loop (the relay
calls the native window from C, without it).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import pika
import pika.frame
import pika.spec
import pytest
from pumpd import _fastpath
from pumpd.dataplane import confirm_window_ref, relay_ref
from pumpd.dataplane.frames import ACK_MODE_ON_CONFIRM
from pumpd.dataplane.properties import encode_property_overrides

IMPLS: dict[str, Any] = {
    "reference": (confirm_window_ref.ConfirmWindow, relay_ref.Relay),
    "native": (_fastpath.ConfirmWindow, _fastpath.Relay),
}
WINDOWS = [100, 1_000, 10_000, 100_000]
CONFIRM_BATCH = 10_000  # messages per timed call
TAKE_EVERY = 100
MESSAGES = 1_000
SRC, DST = 1, 1


def _steady_window(cls: Any, window: int) -> Any:
    w = cls(window)
    for tag in range(1, window + 1):
        w.add(tag)
    return w


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("impl", IMPLS)
def test_window_single_acks(benchmark: Any, impl: str, window: int) -> None:
    benchmark.group = "confirm window: add + single ack, take_ack every 100"
    benchmark.extra_info["messages"] = CONFIRM_BATCH
    w = _steady_window(IMPLS[impl][0], window)
    add, ack, take_ack = w.add, w.ack, w.take_ack

    def run() -> None:
        for i in range(1, CONFIRM_BATCH + 1):
            seq = add(i)
            ack(seq - window, False)
            if i % TAKE_EVERY == 0:
                take_ack()

    benchmark(run)
    assert w.outstanding == window


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("impl", IMPLS)
def test_window_multiple_acks(benchmark: Any, impl: str, window: int) -> None:
    benchmark.group = "confirm window: add, multiple ack + take_ack every 100"
    benchmark.extra_info["messages"] = CONFIRM_BATCH
    w = _steady_window(IMPLS[impl][0], window)
    add, ack, take_ack = w.add, w.ack, w.take_ack

    def run() -> None:
        for i in range(1, CONFIRM_BATCH + 1):
            seq = add(i)
            if i % TAKE_EVERY == 0:
                ack(seq - window, True)
                take_ack()

    benchmark(run)
    assert w.outstanding == window


def _deliveries(n: int, size: int, props: pika.BasicProperties | None = None) -> bytes:
    body = b"x" * size
    out = []
    for tag in range(1, n + 1):
        out.append(pika.frame.Method(SRC, pika.spec.Basic.Deliver(
            consumer_tag="amq.ctag-0123456789abcdef", delivery_tag=tag, redelivered=False,
            exchange="", routing_key="source-queue")).marshal())
        out.append(pika.frame.Header(SRC, size, props or pika.BasicProperties(
            delivery_mode=2)).marshal())
        out.append(pika.frame.Body(SRC, body).marshal())
    return b"".join(out)


def _relay(impl: str, **kw: Any) -> Any:
    args: dict[str, Any] = {
        "source_channel": SRC, "dest_channel": DST, "dest_frame_max": 131072,
        "ack_mode": ACK_MODE_ON_CONFIRM, "window": MESSAGES,
    }
    args.update(kw)
    return IMPLS[impl][1](**args)


def _fresh(impl: str, **kw: Any) -> Callable[[], tuple[tuple[Any, ...], dict[str, Any]]]:
    def setup() -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (_relay(impl, **kw),), {}

    return setup


@pytest.mark.parametrize("impl", IMPLS)
def test_relay_feed_source(benchmark: Any, impl: str) -> None:
    benchmark.group = "relay: feed_source 1,000 x 64 B + take_publishes"
    benchmark.extra_info["messages"] = MESSAGES
    stream = _deliveries(MESSAGES, 64)

    def run(r: Any) -> None:
        r.feed_source(stream)
        r.take_publishes()

    benchmark.pedantic(run, setup=_fresh(impl), rounds=300, warmup_rounds=5)


@pytest.mark.parametrize("impl", IMPLS)
def test_relay_feed_source_with_overrides(benchmark: Any, impl: str) -> None:
    benchmark.group = "relay: feed_source 1,000 x 64 B, 2 property overrides"
    benchmark.extra_info["messages"] = MESSAGES
    stream = _deliveries(MESSAGES, 64, pika.BasicProperties(
        content_type="text/plain", delivery_mode=1, message_id="m-1", timestamp=1_700_000_000))
    overrides = encode_property_overrides({"delivery_mode": 2, "app_id": "pumpd"})

    def run(r: Any) -> None:
        r.feed_source(stream)
        r.take_publishes()

    benchmark.pedantic(run, setup=_fresh(impl, property_overrides=overrides), rounds=300,
                       warmup_rounds=5)


@pytest.mark.parametrize("impl", IMPLS)
def test_relay_feed_source_in_4k_reads(benchmark: Any, impl: str) -> None:
    """The same stream cut into 4 KiB reads, as a socket hands it over: frames straddle reads."""
    benchmark.group = "relay: feed_source 1,000 x 64 B in 4 KiB reads + take_publishes"
    benchmark.extra_info["messages"] = MESSAGES
    stream = _deliveries(MESSAGES, 64)
    reads = [stream[i:i + 4096] for i in range(0, len(stream), 4096)]

    def run(r: Any) -> None:
        feed = r.feed_source
        for data in reads:
            feed(data)
        r.take_publishes()

    benchmark.pedantic(run, setup=_fresh(impl), rounds=300, warmup_rounds=5)


@pytest.mark.parametrize("impl", IMPLS)
def test_relay_feed_destination(benchmark: Any, impl: str) -> None:
    benchmark.group = "relay: feed_destination 1,000 single acks + take_source_output"
    benchmark.extra_info["messages"] = MESSAGES
    stream = _deliveries(MESSAGES, 64)
    acks = b"".join(pika.frame.Method(DST, pika.spec.Basic.Ack(delivery_tag=s, multiple=False))
                    .marshal() for s in range(1, MESSAGES + 1))

    def setup() -> tuple[tuple[Any, ...], dict[str, Any]]:
        r = _relay(impl)
        r.feed_source(stream)
        r.take_publishes()
        return (r,), {}

    def run(r: Any) -> None:
        r.feed_destination(acks)
        r.take_source_output()

    benchmark.pedantic(run, setup=setup, rounds=300, warmup_rounds=5)


_ACK = struct.Struct(">BHIHHQBB")


def _single_acks(first: int, n: int) -> bytes:
    return b"".join(_ACK.pack(1, DST, 13, 60, 80, s, 0, 0xCE) for s in range(first, first + n))


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("impl", IMPLS)
def test_relay_confirms_with_a_window_outstanding(benchmark: Any, impl: str, window: int) -> None:
    """Steady state: ``window`` publishes unconfirmed; each round publishes 1,000 more (untimed)
    and confirms the 1,000 oldest with single acks (timed)."""
    benchmark.group = "relay: feed_destination 1,000 single acks, window outstanding"
    benchmark.extra_info["messages"] = MESSAGES
    batch = _deliveries(MESSAGES, 64)
    r = _relay(impl, window=window + MESSAGES)
    for _ in range(window // MESSAGES):
        r.feed_source(batch)
    r.feed_source(_deliveries(window % MESSAGES, 64))
    r.take_publishes()
    acked = [0]

    def setup() -> tuple[tuple[Any, ...], dict[str, Any]]:
        r.feed_source(batch)
        r.take_publishes()
        acks = _single_acks(acked[0] + 1, MESSAGES)
        acked[0] += MESSAGES
        return (acks,), {}

    def run(acks: bytes) -> None:
        r.feed_destination(acks)
        r.take_source_output()

    benchmark.pedantic(run, setup=setup, rounds=100 if impl == "reference" else 300,
                       warmup_rounds=5)
    assert r.in_flight == window
