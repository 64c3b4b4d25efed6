"""A raw-socket publisher for bursts at rates pika's blocking client cannot reach: each message's
frames are encoded once by pika's codec and written many at a time, paced or not, and the
publisher stops wherever its schedule says, mid-burst included (a source that goes quiet
abruptly, as a real one does)."""

from __future__ import annotations

import random
import socket
import time
from typing import Any

from pika import frame as amqp_frame
from pika import spec


class RawPublisher:
    """One connection, channel 1 open, publishing to the default exchange; no confirms (the
    test counts what reaches its queues). Close it with :meth:`close`, which waits for the
    broker's close-ok: the broker has then taken every publish written before."""

    def __init__(self, port: int, vhost: str, queue: str, body_size: int = 64) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buf = b""
        self.sock.sendall(amqp_frame.ProtocolHeader().marshal())
        self._expect(spec.Connection.Start)
        self._send(0, spec.Connection.StartOk(client_properties={"product": "burst publisher"},
                                              mechanism="PLAIN", response="\0guest\0guest"))
        self._expect(spec.Connection.Tune)
        self._send(0, spec.Connection.TuneOk(channel_max=1, frame_max=131072, heartbeat=0))
        self._send(0, spec.Connection.Open(virtual_host=vhost))
        self._expect(spec.Connection.OpenOk)
        self._send(1, spec.Channel.Open())
        self._expect(spec.Channel.OpenOk)
        self._one = (
            amqp_frame.Method(1, spec.Basic.Publish(exchange="", routing_key=queue)).marshal()
            + amqp_frame.Header(1, body_size, spec.BasicProperties(delivery_mode=1)).marshal()
            + amqp_frame.Body(1, b"m" * body_size).marshal())
        self.sent = 0

    def _send(self, channel: int, method: Any) -> None:
        self.sock.sendall(amqp_frame.Method(channel, method).marshal())

    def _expect(self, method: type) -> None:
        while True:
            used, fr = amqp_frame.decode_frame(self._buf)
            if fr is not None:
                self._buf = self._buf[used:]
                if isinstance(fr, amqp_frame.Method) and isinstance(fr.method, method):
                    return
                raise ConnectionError(f"expected {method.__qualname__}, got {fr!r}")
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("the broker closed the connection")
            self._buf += data

    def burst(self, count: int, rate: float | None, rng: random.Random) -> None:
        """Write ``count`` messages in writes of 1 to 300 messages, at ``rate`` msg/s (None: as
        fast as the socket takes them), then return at once."""
        start, done = time.monotonic(), 0
        while done < count:
            k = min(count - done, rng.choice((1, 3, 17, 64, 300)))
            if rate is not None:
                wait = start + (done + k) / rate - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
            self.sock.sendall(self._one * k)
            done += k
        self.sent += count

    def close(self) -> None:
        self._send(0, spec.Connection.Close(reply_code=200, reply_text="done", class_id=0,
                                            method_id=0))
        self._expect(spec.Connection.CloseOk)
        self.sock.close()
