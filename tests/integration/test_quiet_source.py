"""A source that goes quiet leaves nothing behind: every message the shovel took from it is
published, confirmed and acked without waiting for another arrival.

What could hold a delivery once the source stops (the read hold, the ack delay, the flush, the
confirm window, the destination's write buffer) is driven here the way a busy source drives it:
bursts written on a raw socket at rates from a few thousand to as fast as the broker takes them,
each stopped abruptly at a random point, the next one only after the last has arrived. After
every stop the shovel must keep moving until each message is in the destination queue and every
delivery is acked with nothing left in flight: no pause longer than ``PROGRESS_GAP`` in what the
destination holds and what the shovel counts. At the end the source queue holds no message,
ready or unacknowledged. A second test sends bursts of 64 KiB messages to a destination behind a
slow link with no prefetch, so that the destination's write buffer pauses the source. Both data
planes run the same bursts.

Why a gap and not only a deadline: output held until the *next* read would still get out here,
late, on a read nobody waited for (the pump's backlog reading every few seconds); a gap catches
it, a generous deadline would not. The stall rule's early readings are turned off for the same
reason.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import pytest
from pumpd.engine.amqp091 import relay_path
from pumpd.engine.link import Link
from pumpd.testing import TcpProxy
from pumpd.testing.localnode import LocalNode

from tests.support import amqp_helpers as amqp
from tests.support.burst_helpers import RawPublisher
from tests.support.harness import RunningPumps, running, shovel
from tests.support.impls import IMPLEMENTATIONS, relay_class

BURSTS = 24
# Nothing moving for this long before a burst has settled is a hold. The pump's own reads of the
# source (its backlog, every 4 s at the soonest) would release output held until the next read,
# so the gap must be shorter; it is still long next to the milliseconds of a step, on a 2-core
# machine shared with other test runs and brokers.
PROGRESS_GAP = 2.0
# A backstop for a burst that keeps moving too slowly to settle.
SETTLE_BOUND = 60.0
RATES: tuple[float | None, ...] = (2_000, 10_000, 30_000, 60_000, None)  # None: unpaced
SIZES = (1, 2, 17, 250, 999, 1_000, 1_001, 2_500, 6_000)  # around the prefetch window
PRESSURE_BURSTS = 6


@pytest.fixture(params=IMPLEMENTATIONS)
def impl(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The data plane the sessions of this test run on."""
    monkeypatch.setattr(relay_path, "Relay", relay_class(request.param))
    return str(request.param)


def _settle(pumps: RunningPumps, depth: Callable[[], int], total: int, what: str) -> float:
    """Wait until the destination holds ``total`` messages and the shovel acked as many with
    nothing in flight; fail when nothing moved for ``PROGRESS_GAP``. Returns the time it took."""
    start = moved_at = time.monotonic()
    last: tuple[int, ...] = ()
    while True:
        c = pumps.pumps["s"].counters()
        seen = (depth(), c.consumed, c.published, c.confirmed, c.acked)
        now = time.monotonic()
        if seen[0] == total and c.consumed == c.acked == total and c.in_flight == 0 \
                and c.buffered == 0:
            return now - start
        if seen != last:
            last, moved_at = seen, now
        assert now - moved_at <= PROGRESS_GAP, \
            f"{what}: nothing moved for {now - moved_at:.1f}s with (destination, consumed, " \
            f"published, confirmed, acked) = {seen}; counters {c}"
        assert now - start <= SETTLE_BOUND, f"{what}: not settled after {SETTLE_BOUND:g}s"
        time.sleep(0.005)


def test_every_burst_arrives_and_is_acked_once_the_source_goes_quiet(
        impl: str, node_a: LocalNode, vhost_a: str) -> None:
    uri = node_a.uri(vhost_a)
    amqp.declare_queue(uri, "src")
    amqp.declare_queue(uri, "dst")
    s = shovel(sources={"broker": uri}, destinations={"broker": uri}, queue="src",
               publish_fields={"exchange": "", "routing_key": "dst"},
               ack_mode="on_confirm", prefetch_count=1000, source_read_hold_ms=1,
               stall_timeout=0)
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    worst = 0.0
    with running(s) as pumps, amqp.blocking_connection(uri) as probe_conn:
        probe = probe_conn.channel()

        def depth(queue: str) -> int:
            return int(probe.queue_declare(queue, passive=True).method.message_count)

        pumps.wait_for(lambda: amqp.queue_depth(uri, "src")[1] == 1, 60, "the shovel consuming")
        publisher = RawPublisher(node_a.amqp_port, vhost_a, "src")
        try:
            for i in range(BURSTS):
                rate, count = rng.choice(RATES), rng.choice(SIZES) + rng.randrange(50)
                publisher.burst(count, rate, rng)
                total = publisher.sent
                what = (f"burst {i} (seed {seed}, {impl}): {count} messages at "
                        f"{rate or 'full'} msg/s, {total} in all")
                worst = max(worst, _settle(pumps, lambda: depth("dst"), total, what))
                assert depth("src") == 0, what
                time.sleep(rng.choice((0, 0.001, 0.02)))
        finally:
            publisher.close()
        # the broker's own count: nothing ready, nothing delivered and left unacknowledged
        out = node_a.ctl("list_queues", "-q", "--no-table-headers", "-p", vhost_a, "name",
                         "messages_ready", "messages_unacknowledged")
        rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.strip()}
        assert rows["src"] == ["0", "0"], out
        assert rows["dst"] == [str(publisher.sent), "0"], out
    print(f"{impl}: {BURSTS} bursts, {publisher.sent} messages, seed {seed}; the slowest burst "
          f"settled {worst * 1000:.0f} ms after its last publish")
    assert pumps.status("s").counters.redelivered == 0


def test_bursts_through_write_pressure_arrive_once_the_source_goes_quiet(
        impl: str, node_a: LocalNode, vhost_a: str, proxy_a: TcpProxy,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The destination behind a slow link (100 ms each way) and no prefetch bounding what the
    shovel takes: its write buffer passes ``DEST_WRITE_HIGH_WATER`` and the source is not read
    until it drains. A source going quiet meanwhile leaves nothing behind either."""
    reasons: list[str] = []
    pause_reading = Link.pause_reading

    def recording(self: Link, paused: bool, reason: str = "write-pressure") -> None:
        if paused:
            reasons.append(reason)
        pause_reading(self, paused, reason)

    monkeypatch.setattr(Link, "pause_reading", recording)
    uri = node_a.uri(vhost_a)
    amqp.declare_queue(uri, "src")
    amqp.declare_queue(uri, "dst")
    proxy_a.set_delay_ms(100)
    s = shovel(sources={"broker": uri}, destinations={"broker": amqp.via(node_a, vhost_a, proxy_a)},
               queue="src", publish_fields={"exchange": "", "routing_key": "dst"},
               ack_mode="on_confirm", prefetch_count=0, stall_timeout=0)
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    with running(s) as pumps, amqp.blocking_connection(uri) as probe_conn:
        probe = probe_conn.channel()

        def depth(queue: str) -> int:
            return int(probe.queue_declare(queue, passive=True).method.message_count)

        pumps.wait_for(lambda: amqp.queue_depth(uri, "src")[1] == 1, 60, "the shovel consuming")
        publisher = RawPublisher(node_a.amqp_port, vhost_a, "src", body_size=64 * 1024)
        try:
            for i in range(PRESSURE_BURSTS):
                count = rng.randrange(150, 400)  # 10 to 25 MB
                publisher.burst(count, None, rng)
                _settle(pumps, lambda: depth("dst"), publisher.sent,
                        f"burst {i} (seed {seed}, {impl}): {count} messages of 64 KiB")
                assert depth("src") == 0
        finally:
            publisher.close()
    assert "write-pressure" in reasons, f"the destination's write buffer never filled: {reasons}"
