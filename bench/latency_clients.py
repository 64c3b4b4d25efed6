"""The latency benchmark's two clients, each run as its own process by ``bench/latency.py``:

- ``publish``: a paced publisher. It writes, every ``--tick`` seconds, the messages that are due
  at ``--rate`` msg/s, each body starting with the CLOCK_MONOTONIC time of the write (8 bytes,
  a double), on a raw socket with frames encoded once by pika's codec: per message it splices
  the stamp into a ready buffer, so that even 50,000 msg/s cost it a few % of a core.
- ``consume``: a stamping consumer (no_ack, so the broker's own ack work does not count). It
  reads body frames straight off a raw socket, takes the time of each read, and subtracts each
  body's stamp: the latency from the publisher's write to the consumer's read. It prints one
  JSON line: the percentiles, the count and the first and last arrival times.

CLOCK_MONOTONIC is one clock for every process of a host, so stamps compare across processes.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import time
import urllib.parse

from pika import frame as amqp_frame
from pika import spec

STAMP = struct.Struct("<d")
FRAME_HEAD = struct.Struct(">BHI")
FRAME_END = 0xCE
TYPE_BODY = 3


class RawConnection:
    """A handshaken AMQP 0-9-1 connection with channel 1 open, on a blocking socket."""

    def __init__(self, uri: str, product: str) -> None:
        u = urllib.parse.urlsplit(uri)
        user = urllib.parse.unquote(u.username or "guest")
        password = urllib.parse.unquote(u.password or "guest")
        vhost = urllib.parse.unquote(u.path[1:]) if len(u.path) > 1 else "/"
        self.sock = socket.create_connection((u.hostname or "127.0.0.1", u.port or 5672), 30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.sock.sendall(amqp_frame.ProtocolHeader().marshal())
        self.expect(spec.Connection.Start)
        self.send(0, spec.Connection.StartOk(client_properties={"product": product},
                                             mechanism="PLAIN",
                                             response=f"\0{user}\0{password}"))
        tune = self.expect(spec.Connection.Tune)
        assert isinstance(tune, spec.Connection.Tune)
        self.frame_max = tune.frame_max or 131072
        self.send(0, spec.Connection.TuneOk(channel_max=tune.channel_max,
                                            frame_max=self.frame_max, heartbeat=0))
        self.send(0, spec.Connection.Open(virtual_host=vhost))
        self.expect(spec.Connection.OpenOk)
        self.send(1, spec.Channel.Open())
        self.expect(spec.Channel.OpenOk)

    def close(self) -> None:
        """connection.close and its close-ok: a socket closed without it may lose the last
        publishes, which the broker's channel had not handed to the queue yet."""
        self.send(0, spec.Connection.Close(reply_code=200, reply_text="done", class_id=0,
                                           method_id=0))
        self.expect(spec.Connection.CloseOk)
        self.sock.close()

    def send(self, channel: int, method: object) -> None:
        self.sock.sendall(amqp_frame.Method(channel, method).marshal())  # type: ignore[arg-type]

    def expect(self, method: type) -> object:
        while True:
            used, fr = amqp_frame.decode_frame(self.buf)
            if fr is not None:
                self.buf = self.buf[used:]
                if isinstance(fr, amqp_frame.Method) and isinstance(fr.method, method):
                    return fr.method
                raise ConnectionError(f"expected {method.__qualname__}, got {fr!r}")
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("the broker closed the connection")
            self.buf += data


def message_frames(queue: str, size: int) -> tuple[bytes, int]:
    """One transient message's publish frames for the default exchange to ``queue`` and the
    offset of its body (where the stamp goes)."""
    head = amqp_frame.Method(1, spec.Basic.Publish(exchange="", routing_key=queue)).marshal()
    header = amqp_frame.Header(1, size, spec.BasicProperties(delivery_mode=1)).marshal()
    body = amqp_frame.Body(1, b"\0" * size).marshal()
    return head + header + body, len(head) + len(header) + 7


def publish(uri: str, queue: str, rate: float, seconds: float, size: int, tick: float) -> int:
    conn = RawConnection(uri, "pumpd bench latency publisher")
    frames, stamp_at = message_frames(queue, max(size, STAMP.size))
    one = len(frames)
    total = int(rate * seconds)
    burst = bytearray(frames * max(1, int(rate * tick * 4) + 16))
    sent = 0
    start = time.monotonic()
    while sent < total:
        due = min(total, int((time.monotonic() - start) * rate) + 1) - sent
        if due > 0:
            if due * one > len(burst):
                burst = bytearray(frames * due)
            stamp = STAMP.pack(time.monotonic())
            for i in range(due):
                at = i * one + stamp_at
                burst[at:at + STAMP.size] = stamp
            conn.sock.sendall(memoryview(burst)[:due * one])
            sent += due
        time.sleep(tick)
    conn.close()
    return sent


def percentiles(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    n = len(ordered)

    def at(q: float) -> float:
        return ordered[min(n - 1, int(q * n))] * 1000

    return {"p50_ms": at(0.5), "p90_ms": at(0.9), "p99_ms": at(0.99), "p999_ms": at(0.999),
            "max_ms": ordered[-1] * 1000, "mean_ms": sum(ordered) / n * 1000}


def consume(uri: str, queue: str, expected: int, timeout: float,
            skip: int = 0) -> dict[str, object]:
    conn = RawConnection(uri, "pumpd bench latency consumer")
    conn.send(1, spec.Basic.Consume(queue=queue, no_ack=True, consumer_tag="latency"))
    conn.expect(spec.Basic.ConsumeOk)
    print("ready", flush=True)
    sock, buf = conn.sock, conn.buf
    sock.settimeout(timeout)
    latencies: list[float] = []
    first = last = 0.0
    try:
        while len(latencies) < expected:
            data = sock.recv(1 << 20)
            if not data:
                raise ConnectionError("the broker closed the connection")
            now = time.monotonic()
            buf += data
            pos, end = 0, len(buf)
            while end - pos >= 7:
                ftype, _channel, fsize = FRAME_HEAD.unpack_from(buf, pos)
                if end - pos < fsize + 8:
                    break
                if ftype == TYPE_BODY:
                    latencies.append(now - STAMP.unpack_from(buf, pos + 7)[0])
                    last = now
                    if not first:
                        first = now
                pos += fsize + 8
            buf = buf[pos:]
    except TimeoutError:
        pass
    sock.close()
    result: dict[str, object] = {"received": len(latencies), "first": first, "last": last}
    if len(latencies) > skip:
        result.update(percentiles(latencies[skip:]))
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    sub = ap.add_subparsers(dest="role", required=True)
    p = sub.add_parser("publish", help="a paced publisher of stamped messages")
    p.add_argument("--uri", required=True)
    p.add_argument("--queue", required=True)
    p.add_argument("--rate", type=float, required=True, help="messages per second")
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--size", type=int, default=64, help="body bytes (at least 8: the stamp)")
    p.add_argument("--tick", type=float, default=0.0002, help="seconds between writes")
    c = sub.add_parser("consume", help="a stamping consumer; prints a JSON line of percentiles")
    c.add_argument("--uri", required=True)
    c.add_argument("--queue", required=True)
    c.add_argument("--expected", type=int, required=True)
    c.add_argument("--timeout", type=float, default=10.0,
                   help="seconds without a message after which it stops")
    c.add_argument("--skip", type=int, default=0,
                   help="the first messages left out of the percentiles (warm-up)")
    args = ap.parse_args(argv)
    if args.role == "publish":
        sent = publish(args.uri, args.queue, args.rate, args.seconds, args.size, args.tick)
        print(json.dumps({"sent": sent}), flush=True)
    else:
        print(json.dumps(consume(args.uri, args.queue, args.expected, args.timeout,
                                         args.skip)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
