"""Run ``pumpd`` as a real daemon (``python -m pumpd --config ...``) in tests, talk to its HTTP
endpoint with urllib, and make sure no coordinator or worker outlives the test.

Use the ``pumpd_daemon`` fixture (``tests/integration/conftest.py``)::

    def test_x(pumpd_daemon, node_a, vhost_a):
        d = pumpd_daemon({"s": shovel_def(...)}, "--workers", "2")
        d.wait_for(lambda: d.shovel("s")["state"] == "running", 30, "running")
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pika


def shovel_def(src: str, queue: str, dst: str, dest_queue: str, **clauses: Any) -> dict[str, Any]:
    """A static-form shovel from queue ``queue`` at ``src`` to queue ``dest_queue`` at ``dst``
    (both declared durable), through the default exchange."""
    return {
        "sources": {"broker": src, "declarations": [
            {"queue.declare": {"queue": queue, "durable": True}}]},
        "destinations": {"broker": dst, "declarations": [
            {"queue.declare": {"queue": dest_queue, "durable": True}}]},
        "queue": queue,
        "publish_fields": {"exchange": "", "routing_key": dest_queue},
        **clauses,
    }


def named_shovel(uri: str, name: str, **clauses: Any) -> dict[str, Any]:
    """A shovel on one broker from queue ``NAME-in`` to ``NAME-out``."""
    return shovel_def(uri, f"{name}-in", uri, f"{name}-out", **clauses)


def fill_queue(uri: str, queue: str, bodies: list[bytes], batch: int = 1000) -> None:
    """Publish ``bodies`` to ``queue`` quickly (no publisher confirms, persistent).

    A passive declare on the same channel at the end answers only after the channel has handed
    every publish to the queue; the queue's message count may still lag for a moment (the
    queue process answers the count ahead of deliveries in its mailbox): use
    :func:`wait_depth` when the exact count matters."""
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    try:
        ch = conn.channel()
        props = pika.BasicProperties(delivery_mode=2)
        for i, body in enumerate(bodies):
            ch.basic_publish("", queue, body, props)
            if i % batch == batch - 1:
                conn.process_data_events(0)
        ch.queue_declare(queue, passive=True)
    finally:
        conn.close()


def wait_depth(uri: str, queue: str, n: int, timeout: float = 30) -> None:
    """Wait until ``queue`` holds ``n`` ready messages."""
    from tests.support.amqp_helpers import queue_depth

    deadline = time.monotonic() + timeout
    while (ready := queue_depth(uri, queue)[0]) != n:
        if time.monotonic() > deadline:
            raise AssertionError(f"{queue} holds {ready} messages, not {n}")
        time.sleep(0.1)


def settled(node: Any, vhost: str, queue: str, timeout: float = 30) -> tuple[int, int, int]:
    """``(ready, unacknowledged, consumers)`` of ``queue``, once it has no consumer and nothing
    unacknowledged: the broker drops a closed connection's consumers asynchronously, and the
    management API's figures lag by its statistics interval, so ask the queue itself
    (``rabbitmqctl list_queues``) until it settles."""
    deadline = time.monotonic() + timeout
    while True:
        out = node.ctl("list_queues", "-q", "--no-table-headers", "-p", vhost, "name",
                       "messages_ready", "messages_unacknowledged", "consumers")
        rows = {line.split("\t")[0]: line.split("\t")[1:] for line in out.splitlines() if line}
        ready, unacked, consumers = (int(x) for x in rows[queue])
        if (unacked, consumers) == (0, 0) or time.monotonic() > deadline:
            return ready, unacked, consumers
        time.sleep(0.1)


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(stat[stat.rfind(")") + 2:].split()[1]) == pid:
            out.append(int(entry))
    return out


def pid_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"  # a zombie has exited


def _is_ours(pid: int) -> bool:
    """A spawned worker (guards against a reused pid). Not multiprocessing's resource tracker:
    once the coordinator and workers are gone it unlinks the slot block and exits by itself,
    and killing it would leak the block in /dev/shm."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    if b"resource_tracker" in cmdline:
        return False
    return b"multiprocessing" in cmdline or b"pumpd" in cmdline


class HttpError(Exception):
    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"HTTP {status}: {body}")
        self.status = status
        self.body = body


class Daemon:
    """One pumpd daemon process started by a test."""

    def __init__(self, workdir: Path, config: dict[str, Any], args: tuple[str, ...],
                 port: int, name: str = "pumpd") -> None:
        self.workdir = workdir
        self.config_path = workdir / "shovels.json"
        self.state_path = workdir / "shovels.runtime.json"
        self.token_path = workdir / "shovels.runtime.token"  # the daemon's default: beside it
        self.scheme = "http"  # "https" for a daemon started with --http-tls-cert/-key
        self.context: Any = None  # the ssl.SSLContext that trusts it
        self.log_path = workdir / f"{name}.log"
        self.port = port
        self.args = args
        self.write_config(config)
        self.proc: subprocess.Popen[bytes] | None = None
        self.known_pids: set[int] = set()

    # -- process ---------------------------------------------------------------------------

    def command(self) -> list[str]:
        return [sys.executable, "-m", "pumpd", "--config", str(self.config_path),
                "--http", f"127.0.0.1:{self.port}", "--log-format", "json", *self.args]

    def start(self, wait: bool = True) -> Daemon:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=log)
        self.known_pids.add(self.proc.pid)
        if wait:
            deadline = time.monotonic() + 30
            while True:
                if self.proc.poll() is not None:
                    raise AssertionError(f"pumpd exited {self.proc.returncode}:\n{self.log()}")
                try:
                    self.get("/api/overview")
                    break
                except (OSError, HttpError):
                    if time.monotonic() > deadline:
                        raise AssertionError(f"pumpd did not answer:\n{self.log()}") from None
                    time.sleep(0.1)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def signal(self, sig: int) -> None:
        self.remember_workers()
        assert self.proc is not None
        self.proc.send_signal(sig)

    def wait_exit(self, timeout: float) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"pumpd did not exit within {timeout}s:\n{self.log()}") from None

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM and wait: the daemon's own clean shutdown."""
        self.signal(signal.SIGTERM)
        return self.wait_exit(timeout)

    def remember_workers(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.known_pids.update(_children(self.proc.pid))

    def kill_everything(self) -> None:
        """SIGKILL the coordinator and every process it started that is still alive, by pid."""
        self.remember_workers()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        for pid in self.known_pids:
            if pid_alive(pid) and self.proc is not None and pid != self.proc.pid \
                    and _is_ours(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    # -- config ----------------------------------------------------------------------------

    def write_config(self, config: dict[str, Any]) -> None:
        tmp = self.config_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"shovels": config}, indent=2))
        tmp.replace(self.config_path)

    # -- HTTP ------------------------------------------------------------------------------

    def token(self) -> str:
        """The daemon's bearer token, from its token file (made at its first start)."""
        return self.token_path.read_text().strip()

    def auth_headers(self) -> dict[str, str]:
        try:
            return {"Authorization": f"Bearer {self.token()}"}
        except OSError:
            return {}  # not made yet: the daemon is still starting

    def request(self, method: str, path: str, body: Any = None,
                headers: dict[str, str] | None = None, auth: bool = True,
                scheme: str | None = None, context: Any = None) -> tuple[int, Any]:
        """One request; with the daemon's token unless ``auth`` is False or ``headers`` has
        its own Authorization."""
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
        all_headers = {**(self.auth_headers() if auth else {}), **(headers or {})}
        req = urllib.request.Request(f"{scheme or self.scheme}://127.0.0.1:{self.port}{path}",
                                     data=data, method=method, headers=all_headers)
        try:
            with urllib.request.urlopen(req, timeout=10, context=context or self.context) as resp:
                raw = resp.read()
                status = resp.status
                ctype = resp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as exc:
            raw, status, ctype = exc.read(), exc.code, exc.headers.get("Content-Type", "")
        if not raw:
            return status, None
        return status, json.loads(raw) if ctype.startswith("application/json") else raw.decode()

    def get(self, path: str) -> Any:
        status, body = self.request("GET", path)
        if status != 200:
            raise HttpError(status, body)
        return body

    def shovels(self) -> list[dict[str, Any]]:
        self.remember_workers()
        result: list[dict[str, Any]] = self.get("/api/shovels")
        return result

    def shovel(self, name: str) -> dict[str, Any] | None:
        status, body = self.request("GET", f"/api/shovels/{urllib.parse.quote(name, safe='')}")
        if status == 404:
            return None
        if status != 200:
            raise HttpError(status, body)
        return body  # type: ignore[no-any-return]

    def worker_pids(self, name: str) -> list[int]:
        doc = self.shovel(name)
        assert doc is not None
        return [w["pid"] for w in doc["workers"]]

    # -- waiting and logs ------------------------------------------------------------------

    def wait_for(self, predicate: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"pumpd exited ({self.proc.returncode}) while waiting for "
                                     f"{what}:\n{self.log()}")
            try:
                value = predicate()
                if value:
                    return value
            except (OSError, HttpError, KeyError, IndexError, TypeError) as exc:
                last_error = exc
            time.sleep(0.1)
        try:
            status = json.dumps(self.shovels(), indent=1)[:6000]
        except Exception as exc:  # the status itself may be what is broken
            status = repr(exc)
        raise AssertionError(f"timed out waiting for {what} (last error {last_error!r});\n"
                             f"status: {status}\nlog:\n{self.log()}")

    def log(self, tail: int = 80) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-tail:])

    def log_events(self) -> list[dict[str, Any]]:
        events = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict):
                events.append(doc)
        return events


def running_state(d: Daemon, name: str, workers: int = 1) -> bool:
    doc = d.shovel(name)
    return bool(doc and doc["state"] == "running" and doc["workers_running"] == workers
                and all(w["state"] == "running" for w in doc["workers"]))
