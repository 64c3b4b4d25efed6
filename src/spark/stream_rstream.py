"""A stream read over the streams protocol (``rabbitmq_stream``, port 5552 by default) with
``rstream``, for the read tasks on the executors.

rstream is asyncio; a Spark task's ``read()`` is a plain generator. So each task runs its own
event loop, driven from the generator: every ``next()`` runs the loop until the consumer's
callback has rows (the raw AMQP 1.0 messages of a chunk, decoded by :mod:`pumpd.spark.amqp10`)
or the range is done. The consumer subscribes at the range's first offset (rstream drops the
earlier messages of that chunk) and the task stops at the first offset >= the range's end.
Chosen over rbfly, which read 1.9x faster here (``bench/stream_clients.py``), because rbfly is
GPLv3+ (pumpd is MIT) and its current release needs Python 3.12.

Also :func:`streams_port_open` (``protocol=auto``).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from typing import Any

from ..config.uri import parse_uri
from .amqp10 import RowDecoder
from .read_options import ReadOptions
from .stream_amqp import STALL_SECONDS


def _endpoint(options: ReadOptions) -> dict[str, Any]:
    u = parse_uri(options.uri)
    if u.scheme == "amqps":
        raise ValueError("pumpd option protocol=stream: TLS to the streams port is not "
                         "supported yet; use protocol=amqp with an amqps URI")
    return {"host": u.effective_host, "port": options.stream_port,
            "username": u.username, "password": u.password, "vhost": u.vhost}


def streams_port_open(options: ReadOptions, timeout: float = 2.0) -> bool:
    """Whether the streams port answers (``protocol=auto``) and rstream is installed."""
    try:
        import rstream  # noqa: F401
    except ImportError:
        return False
    u = parse_uri(options.uri)
    if u.scheme == "amqps":
        return False
    try:
        with socket.create_connection((u.effective_host, options.stream_port), timeout):
            return True
    except OSError:
        return False


def read(options: ReadOptions, stream: str, start: int, end: int) -> Iterator[tuple[Any, ...]]:
    """Rows of offsets ``start`` to ``end - 1`` (those the retention left).

    :raises RuntimeError: when no message comes for :data:`STALL_SECONDS`
    """
    if start >= end:
        return
    from rstream import Consumer, ConsumerOffsetSpecification, OffsetType

    loop = asyncio.new_event_loop()
    decode = RowDecoder(stream).row
    rows: list[tuple[Any, ...]] = []
    done = False
    arrived = asyncio.Event()

    def take(raw: bytes, ctx: Any) -> None:
        nonlocal done
        if done:
            return
        if ctx.offset >= end:
            done = True
        else:
            rows.append(decode(raw, ctx.offset))
            done = ctx.offset >= end - 1
        arrived.set()

    ep = _endpoint(options)
    consumer = Consumer(ep["host"], ep["port"], username=ep["username"],
                        password=ep["password"], vhost=ep["vhost"],
                        connection_name=f"pumpd spark read {stream}")
    try:
        loop.run_until_complete(consumer.start())
        loop.run_until_complete(consumer.subscribe(
            stream, take, decoder=lambda b: b, initial_credit=10,
            offset_specification=ConsumerOffsetSpecification(OffsetType.OFFSET, start)))
        while True:
            if not rows and not done:
                try:
                    loop.run_until_complete(asyncio.wait_for(arrived.wait(), STALL_SECONDS))
                except asyncio.TimeoutError:
                    raise RuntimeError(f"pumpd: stream {stream!r}: no message at offset "
                                       f"{start} or later for {STALL_SECONDS:.0f} s (range "
                                       f"ends at {end})") from None
                arrived.clear()
            batch, rows = rows, []
            yield from batch
            if done and not rows:
                return
    finally:
        try:
            loop.run_until_complete(consumer.close())
        except Exception:  # the broker or the network may be gone: the task failed already
            pass
        loop.close()
