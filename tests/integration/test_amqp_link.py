"""The AMQP link against a real broker: reading paused for several reasons at once."""

from __future__ import annotations

import asyncio

import uvloop
from pumpd.config.uri import parse_uri
from pumpd.engine.link import open_link
from pumpd.engine.parameters import to_pika_parameters
from pumpd.testing.localnode import LocalNode

from tests.support.amqp_helpers import Message, declare_queue, publish_messages


def test_reading_resumes_only_once_every_pause_reason_is_gone(node_a: LocalNode,
                                                                vhost_a: str) -> None:
    declare_queue(node_a.uri(vhost_a), "q")
    publish_messages(node_a.uri(vhost_a), "", "q", [Message(b"x")] * 3)

    async def main() -> None:
        uri = parse_uri(node_a.uri(vhost_a))
        link = await open_link(uri, to_pika_parameters(uri, client_name="pumpd test"))
        try:
            link.pause_reading(True)  # write pressure on the other side of a shovel
            link.pause_reading(True, "read-hold")
            link.pause_reading(False, "read-hold")
            assert link.reading_paused
            # Nothing is read: the broker's queue.declare-ok cannot arrive.
            pending = asyncio.ensure_future(link.queue_length("q"))
            done, _ = await asyncio.wait({pending}, timeout=0.5)
            assert not done
            link.pause_reading(False)
            assert not link.reading_paused
            assert await asyncio.wait_for(pending, 10) == 3
        finally:
            await link.close()

    loop = uvloop.new_event_loop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
