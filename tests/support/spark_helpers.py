"""Helpers for tests/integration/test_spark.py: a local SparkSession and a trigger the executors can pull.

Functions shipped to executors are pickled by value (the tests directory is not on the
executors' path), so they may use only what pumpd and its dependencies provide.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pika


def spark_session() -> Any:
    """``local[2,4]`` (two cores, four attempts per task: Spark retries failed partitions)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    return (SparkSession.builder.master("local[2,4]").appName("pumpd-tests")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.driver.memory", "768m")
            .config("spark.python.worker.reuse", "true")
            .getOrCreate())


class Trigger:
    """A loopback port: each connection runs ``action`` in this (the driver's) process, then
    answers one byte, so a task can make something happen at a point of its choosing."""

    def __init__(self, action: Callable[[], None]) -> None:
        self.action = action
        self.calls = 0
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with conn:
                self.calls += 1
                self.action()
                conn.sendall(b"k")

    def close(self) -> None:
        self._sock.close()


def pull(port: int) -> None:
    """Executor side: run the driver's trigger action and wait for it to finish."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.recv(1)


def take_first(uri: str, queue: str, n: int) -> None:
    """Consume and ack exactly the ``n`` oldest messages of ``queue`` (a prefetch of ``n``)."""
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=n)
        got = 0
        for method, _, _ in ch.consume(queue, inactivity_timeout=10):
            if method is None:
                raise RuntimeError(f"only {got} of {n} messages in {queue}")
            got += 1
            if got == n:
                ch.basic_ack(method.delivery_tag, multiple=True)
                break
        ch.cancel()
    finally:
        conn.close()


def batches_of(rows: int, size: int) -> Iterator[tuple[int, int]]:
    for start in range(0, rows, size):
        yield start, min(size, rows - start)


def run_until_batch(query: Any, batches: int) -> int:
    """Let a streaming ``query`` complete micro-batch ``batches`` (failing on its error), stop
    it, and return the rows of the micro-batches it completed."""
    try:
        while query.lastProgress is None or query.lastProgress["batchId"] < batches:
            query.awaitTermination(0.2)
            assert query.exception() is None
    finally:
        query.stop()
    return sum(p["numInputRows"] for p in query.recentProgress)
