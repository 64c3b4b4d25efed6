"""``make demo`` / ``python -m pumpd.demo``: pumpd's main job on a local default.

Uses the RabbitMQ answering on 127.0.0.1:5672 when there is one (creating two vhosts with
rabbitmqctl), or starts a private node otherwise; fills a queue in one vhost, runs the ``pumpd``
command to shovel it into another vhost, shows progress while it runs and the final status.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import orjson
import pika

from . import exitcodes
from .testing.localnode import LocalNode, broker_answers

SRC_VHOST, DST_VHOST = "pumpd-demo-src", "pumpd-demo-dst"
SRC_QUEUE, DST_QUEUE = "demo.orders", "demo.orders.copy"


def say(text: str) -> None:
    print(f"[demo] {text}", flush=True)


def system_rabbitmqctl(*args: str) -> bool:
    ctl = shutil.which("rabbitmqctl") or "/usr/sbin/rabbitmqctl"
    try:
        done = subprocess.run([ctl, *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def prepare_system_broker() -> str | None:
    """Two vhosts on the broker at 5672 for guest; None when they cannot be made or guest cannot
    log in there (a broker set up otherwise is left alone: the demo starts a private node)."""
    for vhost in (SRC_VHOST, DST_VHOST):
        if not system_rabbitmqctl("add_vhost", vhost) and not system_rabbitmqctl("list_vhosts"):
            return None
        if not system_rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*"):
            return None
    base = "amqp://guest:guest@127.0.0.1:5672"
    try:
        pika.BlockingConnection(pika.URLParameters(uri(base, SRC_VHOST))).close()
    except pika.exceptions.AMQPError:
        return None
    return base


def status_endpoint() -> str:
    """pumpd's default status port when it is free, else any free one (pumpd logs which): a
    daemon already running on this machine does not stop the demo."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", 15680))
        except OSError:
            return "127.0.0.1:0"
    return "127.0.0.1:15680"


def uri(base: str, vhost: str) -> str:
    return f"{base}/{vhost}"


def fill(source: str, count: int, size: int) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(source))
    ch = conn.channel()
    ch.queue_declare(SRC_QUEUE, durable=True)
    ch.queue_purge(SRC_QUEUE)
    body = b"o" * size
    started = time.monotonic()
    batch = 1000
    for start in range(0, count, batch):
        for i in range(start, min(start + batch, count)):
            ch.basic_publish(
                "",
                SRC_QUEUE,
                body,
                pika.BasicProperties(delivery_mode=2, message_id=str(i), content_type="text/plain"),
            )
        if start % 10_000 == 0 or start + batch >= count:
            progress(f"[demo] filling {SRC_QUEUE}: {min(start + batch, count):,}/{count:,}")
    # A BlockingChannel in confirm mode waits for every publish (~1,000 msg/s); without it the
    # fill is fast, and the queue's depth tells when the broker has them all.
    while depth(conn, SRC_QUEUE) < count:
        time.sleep(0.1)
    progress(f"[demo] filled {SRC_QUEUE}: {count:,} messages in {time.monotonic() - started:.1f}s")
    end_progress()
    conn.close()


def progress(line: str) -> None:
    """A progress line: redrawn in place on a terminal, one line each in a log or a pipe."""
    if sys.stdout.isatty():
        print(f"\r{line}\x1b[K", end="", flush=True)
    else:
        print(line, flush=True)


def end_progress() -> None:
    if sys.stdout.isatty():
        print()


def depth(conn: pika.BlockingConnection, queue: str) -> int:
    ch = conn.channel()
    n = int(ch.queue_declare(queue, passive=True).method.message_count)
    ch.close()
    return n


def write_config(path: Path, source: str, destination: str) -> None:
    cfg: dict[str, Any] = {
        "shovels": {
            "demo": {
                "sources": {"broker": source},
                "destinations": {
                    "broker": destination,
                    "declarations": [{"queue.declare": {"queue": DST_QUEUE, "durable": True}}],
                },
                "queue": SRC_QUEUE,
                "prefetch_count": 1000,
                "ack_mode": "on_confirm",
                "publish_fields": {"exchange": "", "routing_key": DST_QUEUE},
            }
        }
    }
    path.write_bytes(orjson.dumps(cfg, option=orjson.OPT_INDENT_2))


def watch(source: str, destination: str, count: int, proc: subprocess.Popen[bytes]) -> float:
    src_conn = pika.BlockingConnection(pika.URLParameters(source))
    dst_conn = pika.BlockingConnection(pika.URLParameters(destination))
    started = time.monotonic()
    moved = 0
    try:
        while moved < count:
            if proc.poll() is not None:
                raise SystemExit(f"pumpd exited early with status {proc.returncode}")
            time.sleep(0.5)
            try:
                moved = depth(dst_conn, DST_QUEUE)
            except pika.exceptions.ChannelClosedByBroker:
                moved = 0  # pumpd has not declared the destination queue yet
            left = depth(src_conn, SRC_QUEUE)
            elapsed = time.monotonic() - started
            width = 30
            bar = "#" * int(width * moved / count)
            progress(
                f"[demo] [{bar:<{width}}] {moved:,}/{count:,} moved, {left:,} left at the source,"
                f" {moved / elapsed:,.0f} msg/s"
            )
            if elapsed > 600:
                raise SystemExit("the demo took more than 10 minutes; see pumpd's log above")
    finally:
        end_progress()
        src_conn.close()
        dst_conn.close()
    return time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pumpd.demo", description=__doc__)
    p.add_argument("--messages", type=int, default=100_000, help="how many to move (default 100,000)")
    p.add_argument("--size", type=int, default=256, help="body size in bytes (default 256)")
    p.add_argument("--private-node", action="store_true", help="always start a private node")
    ns = p.parse_args(argv)
    if ns.messages < 1:
        p.error(f"--messages must be at least 1, not {ns.messages}")
    if ns.size < 0:
        p.error(f"--size must not be negative, not {ns.size}")

    with ExitStack() as stack:
        base = None
        if not ns.private_node and broker_answers("127.0.0.1", 5672, 1.0):
            say("RabbitMQ answers on 127.0.0.1:5672; using it")
            base = prepare_system_broker()
            if base is None:
                say("could not create vhosts there with rabbitmqctl, or guest cannot log in; "
                    "starting a private node instead")
        if base is None:
            say("starting a private RabbitMQ node (a few seconds)...")
            node = stack.enter_context(LocalNode())
            for vhost in (SRC_VHOST, DST_VHOST):
                node.add_vhost(vhost)
            base = f"amqp://guest:guest@127.0.0.1:{node.amqp_port}"
            say(f"node {node.nodename} on port {node.amqp_port}")
        source, destination = uri(base, SRC_VHOST), uri(base, DST_VHOST)
        fill(source, ns.messages, ns.size)
        with pika.BlockingConnection(pika.URLParameters(destination)) as conn:
            ch = conn.channel()
            ch.queue_declare(DST_QUEUE, durable=True)
            ch.queue_purge(DST_QUEUE)
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pumpd-demo-")))
        config = workdir / "shovels.json"
        write_config(config, source, destination)
        say(f"shovelling {ns.messages:,} messages from vhost {SRC_VHOST} to {DST_VHOST}:")
        say(f"  pumpd --config {config}")
        proc = subprocess.Popen(
            [sys.executable, "-m", "pumpd", "--config", str(config), "--status-interval", "2",
             "--http", status_endpoint()],
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            elapsed = watch(source, destination, ns.messages, proc)
            say(f"all {ns.messages:,} moved in {elapsed:.1f}s ({ns.messages / elapsed:,.0f} msg/s);"
                " stopping pumpd with SIGTERM (it drains and exits 0)")
            proc.send_signal(signal.SIGTERM)
            status = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        with pika.BlockingConnection(pika.URLParameters(source)) as c1, pika.BlockingConnection(
            pika.URLParameters(destination)
        ) as c2:
            left, arrived = depth(c1, SRC_QUEUE), depth(c2, DST_QUEUE)
        say(f"final: pumpd exit status {status}; {arrived:,} in {DST_VHOST}/{DST_QUEUE}, "
            f"{left:,} left in {SRC_VHOST}/{SRC_QUEUE}")
        ok = status == exitcodes.OK and arrived == ns.messages and left == 0
        say("OK: every message moved, nothing left behind" if ok else "FAILED: see above")
        return exitcodes.OK if ok else exitcodes.FAILURE


if __name__ == "__main__":
    sys.exit(main())
