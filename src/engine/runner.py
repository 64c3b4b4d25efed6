"""Run every shovel of a configuration in this process, in the foreground, until SIGTERM / SIGINT.

On a signal every shovel stops consuming, publishes what it holds, waits (bounded by the drain
timeout) for outstanding confirms, acks them and closes; then the process exits 0. A progress line
per shovel is logged every ``status_interval`` seconds.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import time
from collections.abc import Callable

from .. import exitcodes
from ..config.model import PumpConfig, ShovelConfig
from ..dataplane.implementation import IMPLEMENTATION
from .lease import LeaseSpec
from .pump import Pump
from .queue_names import lease_queue
from .status import ShovelStatus, State, lag_seconds

log = logging.getLogger("pumpd.runner")


def describe_endpoint(shovel: ShovelConfig, side: str) -> str:
    return (shovel.source if side == "source" else shovel.destination).describe()


def status_for(shovel: ShovelConfig) -> ShovelStatus:
    return ShovelStatus(
        name=shovel.name,
        source=describe_endpoint(shovel, "source"),
        destination=describe_endpoint(shovel, "destination"),
        implementation=IMPLEMENTATION,
    )


class ProgressReporter:
    """Logs one line per shovel with its state, totals and rate since the last line."""

    def __init__(self, statuses: list[ShovelStatus]) -> None:
        self.statuses = statuses
        now = time.monotonic()
        # the first line's rate is measured from the start
        self._last: dict[str, tuple[float, int]] = {st.name: (now, 0) for st in statuses}

    def line(self, st: ShovelStatus, *, with_rate: bool = True) -> str:
        rate = ""
        if with_rate:
            now = time.monotonic()
            moved = st.counters.acked or st.counters.published
            t0, n0 = self._last.get(st.name, (now, moved))
            rate = f" | {(moved - n0) / (now - t0) if now > t0 else 0.0:,.0f} msg/s"
            self._last[st.name] = (now, moved)
        c = st.counters
        lag = lag_seconds(c, time.time())
        reason = f" ({st.reason})" if st.reason else ""
        return (
            f"{st.name}: {st.state.label}{reason} | consumed {c.consumed} published {c.published}"
            f" confirmed {c.confirmed} acked {c.acked}{rate} | in flight "
            f"{c.in_flight} | nacked {c.nacked} returned {c.returned} redelivered "
            f"{c.redelivered} reconnects {c.reconnects}"
            + (f" (stalled {c.stall_restarts})" if c.stall_restarts else "")
            + ("" if lag is None else f" | lag {lag:,.1f} s"
               + ("" if c.lag_messages < 0 else f" ({c.lag_messages:,} msgs)"))
        )

    async def run(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            for st in self.statuses:
                log.info("%s", self.line(st))


async def run_shovels(
    cfg: PumpConfig,
    stop: asyncio.Event,
    *,
    drain_timeout: float = 30.0,
    status_interval: float = 0.0,
    on_status: Callable[[list[ShovelStatus]], None] | None = None,
) -> list[ShovelStatus]:
    """Run every shovel until ``stop`` is set or all have terminated; returns their statuses."""
    statuses = [status_for(s) for s in cfg.shovels.values()]
    if on_status is not None:
        on_status(statuses)
    c = cfg.cluster  # a member of a group: one position per shovel here, index 0
    pumps = [Pump(s, st, drain_timeout=drain_timeout,
                  lease=None if c is None else LeaseSpec(lease_queue(c.name, s.name, 0),
                                                         c.lease_retry, c.name))
             for s, st in zip(cfg.shovels.values(), statuses, strict=False)]
    reporter = None
    if status_interval > 0:
        reporter = asyncio.create_task(ProgressReporter(statuses).run(status_interval))
    try:
        await asyncio.gather(*(p.run(stop) for p in pumps))
    finally:
        if reporter is not None:
            reporter.cancel()
    for st in statuses:
        log.info("%s", ProgressReporter([]).line(st, with_rate=False))
    return statuses


def exit_status(statuses: list[ShovelStatus]) -> int:
    """0 when every shovel stopped on request or by design; 1 when one gave up on a failure or
    was stopped by an undeliverable message (policy stop)."""
    for st in statuses:
        if st.state == State.TERMINATED and st.reason and (
                "not reconnecting" in st.reason or st.reason.startswith("undeliverable message")):
            return exitcodes.FAILURE
    return exitcodes.OK


def run_foreground(cfg: PumpConfig, *, drain_timeout: float, status_interval: float) -> int:
    """Blocking entry point of ``pumpd --config FILE``."""
    import uvloop

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            # the handler only records the request; the pumps act on it
            loop.add_signal_handler(sig, stop.set)
        log.info(
            "pumpd: running %d shovel(s) on the %s data plane", len(cfg.shovels), IMPLEMENTATION
        )
        statuses = await run_shovels(
            cfg, stop, drain_timeout=drain_timeout, status_interval=status_interval
        )
        return exit_status(statuses)

    if sys.version_info >= (3, 11):
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(main())
    uvloop.install()
    return asyncio.run(main())
