"""The engine's contract with a protocol (``engine/endpoint.py``): the AMQP 0-9-1 endpoints keep it
against a real broker, two of them are paired on the native relay, a pair with no path is refused
by name, and the engine's protocol-agnostic modules reach a wire only through the contract."""

from __future__ import annotations

import ast
import asyncio
import builtins
import time
from collections.abc import Callable
from pathlib import Path as FilePath
from typing import Any

import pytest
import uvloop
from pumpd.config.model import AckMode, Declaration
from pumpd.config.uri import parse_uri
from pumpd.engine import wiring
from pumpd.engine.amqp091 import RelayPath
from pumpd.engine.batching import BatchingRule
from pumpd.engine.endpoint import (
    ByteDestination,
    ByteSource,
    Destination,
    Path,
    Settlement,
    Source,
)
from pumpd.engine.forwarding import ACK_MODES
from pumpd.testing.localnode import LocalNode

from tests.support.amqp_helpers import Message, declare_queue, publish_messages, queue_depth
from tests.support.harness import shovel

ENGINE = FilePath(__file__).resolve().parents[2] / "src" / "engine"
# The engine's modules that must not know a wire: they drive endpoints through the contract.
PROTOCOL_AGNOSTIC = ("session.py", "session_watch.py", "pump.py", "undeliverable.py", "fence.py",
                     "stall.py", "pausing.py", "ending.py", "batching.py", "brokers.py")
# What knows a wire: the 0-9-1 link, pika, and the data plane's frames and relay.
WIRE_MODULES = ("link", "link_stream", "pika", "dataplane.frames", "dataplane.implementation",
                "amqp091")


def _imports(path: FilePath) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            names.add(module)
            names.update(f"{module}.{alias.name}" if module else alias.name
                         for alias in node.names)
    return names


@pytest.mark.parametrize("module", PROTOCOL_AGNOSTIC)
def test_a_protocol_agnostic_module_imports_no_wire(module: str) -> None:
    imported = _imports(ENGINE / module)
    wired = {name for name in imported for wire in WIRE_MODULES
             if name == wire or name.endswith(f".{wire}") or name.startswith(f"{wire}.")
             or f".{wire}." in f".{name}."}
    assert not wired, f"engine/{module} imports {sorted(wired)}: it must use engine/endpoint.py"


class _NoWire:
    """A side that keeps the contract's calls but offers no byte stream: what a protocol
    without a native path looks like to the pairing."""

    last_declared_queue = ""
    backlog_known = True
    is_open = True
    heartbeat = 0

    def __init__(self, closed: asyncio.Future[BaseException]) -> None:
        self.closed = closed

    def pause_reading(self, paused: bool, reason: str = "write-pressure") -> None: ...
    def on_blocked(self, callback: Callable[[bool], None]) -> None: ...
    async def declare(self, declarations: Any) -> None: ...
    async def close_quietly(self) -> None: ...
    def abort(self) -> None: ...
    async def take_lease(self, name: str) -> None: ...
    async def backlog(self, queue: str) -> int:
        return 0
    async def credit(self, prefetch: int) -> None: ...
    async def consume(self, queue: str, *, no_ack: bool, arguments: Any,
                      consumer_tag: str) -> str:
        return ""
    async def cancel(self, consumer_tag: str) -> None: ...
    def settle(self, first: int, last: int, how: Settlement) -> None: ...
    async def expect_confirms(self) -> None: ...
    def on_write_pressure(self, callback: Callable[[bool], None], high_water: int) -> None: ...


def test_a_pair_with_no_path_is_refused_by_name() -> None:
    loop = uvloop.new_event_loop()
    try:
        side = _NoWire(loop.create_future())
        assert isinstance(side, Source) and isinstance(side, Destination)
        assert not isinstance(side, ByteSource)
        with pytest.raises(NotImplementedError, match="_NoWire"):
            wiring.pair(side, side)
    finally:
        loop.close()


def _run(main: Callable[[], Any]) -> None:
    loop = uvloop.new_event_loop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


def test_the_0_9_1_source_settles_ranges_as_the_contract_says(node_a: LocalNode,
                                                               vhost_a: str) -> None:
    """Ten deliveries: 1..3 accepted at once, 4 rejected (no dead-letter exchange: dropped),
    5..10 requeued at once: six are left in the queue, none unacknowledged."""
    uri_text = node_a.uri(vhost_a)
    declare_queue(uri_text, "q")
    publish_messages(uri_text, "", "q", [Message(b"m%d" % i) for i in range(10)])

    async def main() -> None:
        source = await wiring.open_source(parse_uri(uri_text), "pumpd contract test")
        try:
            assert isinstance(source, ByteSource) and source.wire == "amqp091"
            assert await source.backlog("q") == 10
            await source.credit(10)
            delivered = 0

            def count(data: builtins.bytes) -> builtins.bytes:
                nonlocal delivered
                delivered += data.count(b"\x00\x3c\x00\x3c")  # basic.deliver's method id
                return data

            source.intercept(count)
            await source.consume("q", no_ack=False, arguments={}, consumer_tag="")
            deadline = time.monotonic() + 30
            while delivered < 10 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert delivered == 10
            source.settle(1, 3, Settlement.ACCEPT)
            source.settle(4, 4, Settlement.REJECT)
            source.settle(5, 10, Settlement.REQUEUE)
        finally:
            await source.close_quietly()

    _run(main)
    assert queue_depth(uri_text, "q") == (6, 0)


class _Hooks:
    """The session's side of a path, as small as the contract allows: every flush forwards and
    settles at once."""

    def __init__(self) -> None:
        self.path: Path | None = None

    def flush(self, *, acks_due: bool = False) -> None:
        assert self.path is not None
        self.path.flush_scheduled = False
        self.path.forward()
        self.path.settle()

    def source_paused(self) -> None:
        raise AssertionError("nothing here is undeliverable")

    def destination_paused(self) -> None:
        raise AssertionError("nothing here is returned")

    def hold_source(self, seconds: float) -> None: ...


def test_two_0_9_1_sides_are_paired_on_the_relay_and_move_through_the_contract(
        node_a: LocalNode, vhost_a: str) -> None:
    uri_text = node_a.uri(vhost_a)
    declare_queue(uri_text, "src")
    declare_queue(uri_text, "dst")
    publish_messages(uri_text, "", "src", [Message(b"x" * 64)] * 500)
    uri = parse_uri(uri_text)
    cfg = shovel(sources={"broker": uri_text}, destinations={"broker": uri_text}, queue="src",
                 publish_fields={"exchange": "", "routing_key": "dst"})

    async def main() -> None:
        source = await wiring.open_source(uri, "pumpd contract test (source)")
        destination = await wiring.open_destination(uri, "pumpd contract test (destination)",
                                                    cfg)
        try:
            assert isinstance(destination, ByteDestination)
            await destination.declare([Declaration("queue.declare", {"queue": "dst",
                                                                     "durable": True})])
            await destination.expect_confirms()
            await source.credit(100)
            path = wiring.pair(source, destination, window=100,
                               ack_mode=ACK_MODES[AckMode.ON_CONFIRM], exchange=b"",
                               routing_key=b"dst", mandatory=False)
            assert isinstance(path, RelayPath)
            hooks = _Hooks()
            hooks.path = path
            path.start(hooks, read_hold=BatchingRule(0.0, 0.0))
            await source.consume("src", no_ack=False, arguments={}, consumer_tag="")
            deadline = time.monotonic() + 60
            while path.acked < 500 and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert (path.consumed, path.confirmed, path.acked, path.in_flight) == (500, 500, 500, 0)
            assert await source.backlog("src") == 0
        finally:
            await source.close_quietly()
            await destination.close_quietly()

    _run(main)
    assert queue_depth(uri_text, "dst") == (500, 0)
    assert queue_depth(uri_text, "src") == (0, 0)
