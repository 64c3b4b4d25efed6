"""Run pumps in a background thread on their own uvloop loop, so a test can drive brokers with
blocking pika calls meanwhile and stop the pumps as SIGTERM would."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import uvloop
from pumpd.config.model import ShovelConfig
from pumpd.config.parse import parse_config
from pumpd.engine.pump import Pump
from pumpd.engine.status import ShovelStatus, State


class RunningPumps:
    def __init__(self, shovels: list[ShovelConfig], **pump_kw: Any) -> None:
        self.statuses = {s.name: ShovelStatus(s.name) for s in shovels}
        self.history: dict[str, list[tuple[State, str | None]]] = {s.name: [] for s in shovels}
        self.pumps: dict[str, Pump] = {}
        self._shovels = shovels
        self._pump_kw = pump_kw
        self._loop = uvloop.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main())
        except BaseException as exc:  # surfaced to the test by stop()
            self.error = exc

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        runs = []
        for s in self._shovels:
            st = self.statuses[s.name]
            hist = self.history[s.name]

            class Sink:
                def state_changed(self, state: State, reason: str | None, at: float,
                                  st: ShovelStatus = st, hist: list[Any] = hist) -> None:
                    hist.append((state, reason))
                    st.state_changed(state, reason, at)

                def counters_changed(self, counters: Any, st: ShovelStatus = st) -> None:
                    st.counters_changed(counters)

            pump = Pump(s, Sink(), **self._pump_kw)
            self.pumps[s.name] = pump
            runs.append(pump.run(self._stop))
        await asyncio.gather(*runs)

    def start(self) -> RunningPumps:
        self._thread.start()
        return self

    def stop(self, timeout: float = 60) -> None:
        while self._stop is None and self._thread.is_alive():
            time.sleep(0.01)
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "pumps did not stop"
        if self.error is not None:
            raise self.error

    def on_loop(self, call: Callable[[Pump], Any], name: str | None = None) -> None:
        """Call ``call(pump)`` on the pumps' event loop (as Pump.pause and resume must be)."""
        name = name or next(iter(self.statuses))
        self.wait_for(lambda: name in self.pumps, 30, f"pump {name} created")
        pump = self.pumps[name]
        self._loop.call_soon_threadsafe(call, pump)

    def status(self, name: str | None = None) -> ShovelStatus:
        return self.statuses[name or next(iter(self.statuses))]

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 60, what: str = "") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            if not self._thread.is_alive():
                raise AssertionError(f"pumps stopped while waiting for {what}: {self.error!r}")
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}; status {self.statuses}")


def shovel(name: str = "s", **clauses: Any) -> ShovelConfig:
    """A ShovelConfig from JSON clauses, through the real config parser."""
    return parse_config({"shovels": {name: clauses}}).shovels[name]


@contextmanager
def running(*shovels: ShovelConfig, **pump_kw: Any) -> Iterator[RunningPumps]:
    pumps = RunningPumps(list(shovels), **pump_kw).start()
    try:
        yield pumps
    finally:
        pumps.stop()
