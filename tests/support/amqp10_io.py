"""Sending and receiving AMQP 1.0 messages in tests, through pumpd's own client, blocking: what a
test puts into a source over AMQP 1.0 and takes out of a destination over AMQP 1.0."""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import Iterable, Sequence
from typing import Any

from pumpd.amqp10.connection import Connection, connect
from pumpd.amqp10.message import Message, decode_message, encode_message
from pumpd.amqp10.performatives import Accepted
from pumpd.testing.amqp10_endpoint import Amqp10Address


async def _connect(address: Amqp10Address) -> Connection:
    return await connect(host=address.host, port=address.port, sasl="plain",
                         username=address.user, password=address.password,
                         hostname=address.hostname, container_id="pumpd-tests",
                         idle_time_out=None, step_timeout=30)


async def _send(address: Amqp10Address, target: str, payloads: Sequence[bytes]) -> None:
    conn = await _connect(address)
    try:
        session = await conn.begin()
        sender = await session.attach_sender(target, name="tests-sender")
        outcomes: dict[int, object] = {}
        done = asyncio.get_running_loop().create_future()
        credit = asyncio.Event()

        def settled(first: int, last: int, state: object) -> None:
            for n in range(first, last + 1):
                outcomes[n] = state
            if len(outcomes) >= len(payloads) and not done.done():
                done.set_result(None)

        sender.on_disposition(settled)
        sender.on_credit(credit.set)
        numbers = []
        for payload in payloads:
            while sender.credit <= 0:
                credit.clear()
                await asyncio.wait_for(credit.wait(), 30)
            numbers.append(sender.send(payload, settled=False))
        if payloads:
            await asyncio.wait_for(done, 60)
        refused = [(n, outcomes[n]) for n in numbers if not isinstance(outcomes[n], Accepted)]
        assert not refused, f"not accepted: {refused[:5]}"
    finally:
        await conn.close()


async def _receive(address: Amqp10Address, source: str, n: int, timeout: float) -> list[bytes]:
    conn = await _connect(address)
    got: list[bytes] = []
    try:
        session = await conn.begin()
        receiver = await session.attach_receiver(source, name="tests-receiver", credit=500)
        done = asyncio.get_running_loop().create_future()

        def on_transfer(delivery: int, payload: bytes, settled: bool) -> None:
            got.append(payload)
            receiver.settle(delivery, delivery, Accepted())
            if len(got) >= n and not done.done():
                done.set_result(None)

        receiver.on_transfer(on_transfer)
        if n:
            await asyncio.wait_for(done, timeout)
    finally:
        await conn.close()
    return got


def send(address: Amqp10Address, target: str, messages: Sequence[Message | bytes]) -> None:
    """Send every message to ``target``, unsettled; returns once each one is accepted."""
    payloads = [m if isinstance(m, bytes) else encode_message(m) for m in messages]
    asyncio.run(_send(address, target, payloads))


def receive(address: Amqp10Address, source: str, n: int, timeout: float = 60) -> list[bytes]:
    """Take ``n`` messages from ``source`` (accepted as they come); their encoded bytes."""
    return asyncio.run(_receive(address, source, n, timeout))


def uri10(address: Amqp10Address, *, port: int | None = None, **query: str | int) -> str:
    """A pumpd AMQP 1.0 URI for a private node's vhost (RabbitMQ 3.x: ``hostname=vhost:NAME``),
    through another ``port`` (a fault proxy's) when given, with ``query``'s parameters added."""
    url = address.url()
    if port is not None:
        url = url.replace(f":{address.port}", f":{port}")
    params = {"sasl": "plain", "hostname": address.hostname or "", **query}
    return f"{url}?{urllib.parse.urlencode(params, safe=':')}"


def side10(address: Amqp10Address, queue: str, *, port: int | None = None,
           **query: str | int) -> dict[str, str]:
    """An AMQP 1.0 side (source or destination) on an existing queue of RabbitMQ 3.x."""
    return {"protocol": "amqp10", "broker": uri10(address, port=port, **query),
            "address": f"/amq/queue/{queue}"}


def message_ids(payloads: Iterable[bytes]) -> list[Any]:
    """The properties' message-id of each encoded message (None where it has none)."""
    out: list[Any] = []
    for payload in payloads:
        props = decode_message(payload).properties
        out.append(None if props is None else props.message_id)
    return out
