"""Failover of a group of daemons: how long positions stay unconsumed when a member
dies or freezes, and what that costs in lost and duplicated messages.

``--members N`` daemons (default 2) run the same configuration with ``--cluster bench``: 10
shovels (``--shovels``), each from its own queue to its own queue on one private RabbitMQ node,
source connections with a heartbeat of ``--heartbeat`` seconds (default 5). Member 0 starts
first and takes every lease; the others stand by. A publisher sends numbered messages to the
source queues at ``--rate`` messages/s in all (confirmed). Then member 0 is hit by each fault of
``--faults`` in turn, on a fresh group each time:

* ``kill``: SIGKILL to the coordinator and every worker (not multiprocessing's resource tracker,
  which frees the status slots when the others are gone);
* ``stop``: SIGSTOP to its whole process group for ``--freeze`` seconds (default four
  heartbeat timeouts: RabbitMQ closes a silent connection two to three heartbeat timeouts after
  the last byte it received, ``rabbit_heartbeat``), then SIGCONT: a frozen machine that comes
  back.

Reported per fault: seconds from the fault until every source queue has exactly one consumer
again *and* the other members report every position running (the broker's consumer count alone
cannot tell a frozen consumer from a live one); seconds until the broker let go of the victim's
first consumer (at once for ``kill``; for ``stop``, when its heartbeat check closed the frozen
connection) and from then to the end of the failover; and, per source queue, the longest a
queue went without a consumer, from the broker letting go of the victim's (each connection at
its own heartbeat phase) until another member's consumer came (what pumpd adds: ``lease_retry``
and a connection); the most consumers any source queue had at any
check (sampled every 0.25 s from the broker by passive declares: 1 means never two at once);
messages sent, lost (sent, never arrived) and duplicated (arrived more than once), once
everything has settled.

    python bench/failover.py                        # 2 members, kill then stop
    python bench/failover.py --members 3 --faults kill,kill,stop

Every run is a JSON line in ``bench/results/failover-<time>.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pika
from pumpd.testing.localnode import LocalNode, find_free_port

from common import process_tree, record

RESULTS = Path(__file__).resolve().parent / "results"


def shovel(src_uri: str, dst_uri: str, i: int) -> dict[str, Any]:
    return {
        "sources": {"broker": src_uri, "declarations": [
            {"queue.declare": {"queue": f"src{i}", "durable": True}}]},
        "destinations": {"broker": dst_uri, "declarations": [
            {"queue.declare": {"queue": f"dst{i}", "durable": True}}]},
        "queue": f"src{i}",
        "publish_fields": {"exchange": "", "routing_key": f"dst{i}"},
        "prefetch_count": 100,
        "reconnect_delay": 1,
    }


class Member:
    """One daemon of the group, in a process group of its own (as on a machine of its own)."""

    def __init__(self, workdir: Path, n: int, config: Path, extra: tuple[str, ...] = ()) -> None:
        self.port = find_free_port()
        self.log = (workdir / f"member{n}.log").open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pumpd", "--config", str(config), "--cluster", "bench",
             "--http", f"127.0.0.1:{self.port}", "--http-open-reads",
             "--state-file", str(workdir / f"member{n}.state.json"),
             "--heartbeat-timeout", "600", "--log-level", "warning", *extra],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log, start_new_session=True)

    def shovels(self) -> list[dict[str, Any]]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/shovels", timeout=5) as r:
            docs: list[dict[str, Any]] = json.loads(r.read())
        return docs

    def running(self) -> int:
        """Positions this member reports running."""
        try:
            return sum(1 for d in self.shovels() for w in d["workers"]
                       if w["state"] in ("running", "blocked"))
        except OSError:
            return 0

    def kill(self) -> None:
        for pid in process_tree(self.proc.pid):
            try:
                if b"resource_tracker" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                    os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(90)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()


class Publisher(threading.Thread):
    """Numbered messages, round robin over the source queues, confirmed."""

    def __init__(self, uri: str, queues: int, rate: float) -> None:
        super().__init__(daemon=True)
        self.uri, self.queues, self.rate = uri, queues, rate
        self.sent = [0] * queues
        self.halt = threading.Event()

    def run(self) -> None:
        conn = pika.BlockingConnection(pika.URLParameters(self.uri))
        ch = conn.channel()
        ch.confirm_delivery()
        props = pika.BasicProperties(delivery_mode=2)
        start, total = time.monotonic(), 0
        while not self.halt.is_set():
            due = int((time.monotonic() - start) * self.rate)
            while total < due:
                q = total % self.queues
                ch.basic_publish("", f"src{q}", b"%d" % self.sent[q], props)
                self.sent[q] += 1
                total += 1
            conn.sleep(0.01)
        conn.close()


class Broker:
    """``{queue: (messages ready, consumers)}`` from the broker itself, by passive declares on
    one connection: a few milliseconds, where ``rabbitmqctl list_queues`` takes a second on a
    busy machine and would blur what is measured."""

    def __init__(self, uri: str, queues: list[str]) -> None:
        self.conn = pika.BlockingConnection(pika.URLParameters(uri))
        self.ch = self.conn.channel()
        self.queues = queues

    def rows(self) -> dict[str, tuple[int, int]]:
        rows = {}
        for q in self.queues:
            m = self.ch.queue_declare(q, passive=True).method
            rows[q] = (int(m.message_count), int(m.consumer_count))
        return rows

    def close(self) -> None:
        self.conn.close()


def unacked(node: LocalNode, vhost: str) -> int:
    """Messages delivered and not yet acknowledged, in every queue of ``vhost``."""
    out = node.ctl("list_queues", "-q", "--no-table-headers", "-p", vhost,
                   "messages_unacknowledged")
    return sum(int(line) for line in out.split())


def arrivals(uri: str, sent: list[int]) -> tuple[int, int]:
    """Messages lost (sent, never arrived) and duplicated, over the destination queues."""
    lost = dups = 0
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    ch = conn.channel()
    for i, n_sent in enumerate(sent):
        got: Counter[bytes] = Counter()
        while True:
            method, _props, body = ch.basic_get(f"dst{i}", auto_ack=True)
            if method is None:
                break
            got[body] += 1
        lost += sum(1 for n in range(n_sent) if b"%d" % n not in got)
        dups += sum(got.values()) - len(got)
    conn.close()
    return lost, dups


def one_run(node: LocalNode, fault: str, ns: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    vhost = f"failover-{fault}-{os.getpid()}-{int(time.time())}"
    node.add_vhost(vhost)
    uri = node.uri(vhost)
    src_uri = f"{uri}{'&' if '?' in uri else '?'}heartbeat={ns.heartbeat}"
    config = workdir / f"{vhost}.json"
    config.write_text(json.dumps({"shovels": {f"s{i}": shovel(src_uri, uri, i)
                                              for i in range(ns.shovels)}}))
    srcs = [f"src{i}" for i in range(ns.shovels)]
    members: list[Member] = []
    most = 0
    broker = Broker(uri, srcs)
    queue_rows = broker.rows
    try:
        members.append(Member(workdir, 0, config))
        wait(lambda: members[0].running() == ns.shovels, 60, "member 0 running every position")
        members += [Member(workdir, n, config) for n in range(1, ns.members)]
        wait(lambda: all(m.running() == 0 and len(m.shovels()) == ns.shovels
                         for m in members[1:]), 60, "the others standing by")
        pub = Publisher(uri, ns.shovels, ns.rate)
        pub.start()
        time.sleep(ns.warmup)
        rows = queue_rows()
        most = max(rows[q][1] for q in srcs)
        victim, others = members[0], members[1:]
        began = time.monotonic()
        if fault == "kill":
            victim.kill()
        else:
            os.killpg(victim.proc.pid, signal.SIGSTOP)
        recovered = dropped = None
        resumed = False
        # per source queue: when the broker let go of the victim's consumer on it (the broker's
        # heartbeat check closes each connection at its own phase), and when one came back
        gone: dict[str, float] = {}
        back: dict[str, float] = {}
        while time.monotonic() - began < ns.freeze + 60:
            rows = queue_rows()
            most = max(most, *(rows[q][1] for q in srcs))
            now = time.monotonic() - began
            for q in srcs:
                if q not in gone and rows[q][1] == 0:
                    gone[q] = now
                elif q in gone and q not in back and rows[q][1] == 1:
                    back[q] = now
            if dropped is None and gone:
                dropped = min(gone.values())  # the broker let go of the victim's first consumer
            if recovered is None and all(rows[q][1] == 1 for q in srcs) \
                    and sum(m.running() for m in others) == ns.shovels:
                recovered = time.monotonic() - began
            if fault == "stop" and not resumed and time.monotonic() - began >= ns.freeze:
                os.killpg(victim.proc.pid, signal.SIGCONT)
                resumed = True
            if recovered is not None and (fault == "kill" or resumed):
                break
            time.sleep(0.25)
        time.sleep(ns.after)  # the resumed member finds its lease taken
        rows = queue_rows()
        most = max(most, *(rows[q][1] for q in srcs))
        pub.halt.set()
        pub.join(30)
        deadline = time.monotonic() + 120
        while (any(queue_rows()[q][0] for q in srcs) or unacked(node, vhost)) \
                and time.monotonic() < deadline:
            time.sleep(0.5)
        victim_running = victim.running() if fault == "stop" else 0
        for m in members:
            m.stop()
        lost, dups = arrivals(uri, pub.sent)
        return {"bench": "failover", "case": fault, "members": ns.members,
                "shovels": ns.shovels, "heartbeat_s": ns.heartbeat,
                "freeze_s": ns.freeze if fault == "stop" else None, "rate": ns.rate,
                "seconds_to_all_consumed": None if recovered is None else round(recovered, 2),
                "seconds_to_broker_drop": None if dropped is None else round(dropped, 2),
                "seconds_after_broker_drop": None if recovered is None or dropped is None
                else round(recovered - dropped, 2),
                "most_seconds_unconsumed_per_queue": round(max(
                    (back[q] - gone[q] for q in back), default=0.0), 2),
                "most_consumers_per_queue": most, "sent": sum(pub.sent), "lost": lost,
                "duplicates": dups, "victim_running_after_resume": victim_running}
    finally:
        broker.close()
        for m in members:
            if m.proc.poll() is None:
                m.kill()
        node.delete_vhost(vhost)


def wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except OSError:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"timed out waiting for {what}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--members", type=int, default=2)
    p.add_argument("--shovels", type=int, default=10)
    p.add_argument("--rate", type=float, default=500.0, help="messages/s in all")
    p.add_argument("--heartbeat", type=int, default=5, help="source heartbeat timeout, seconds")
    p.add_argument("--freeze", type=float, default=None,
                   help="seconds a stopped member stays frozen (default 4 heartbeat timeouts)")
    p.add_argument("--faults", default="kill,stop")
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--after", type=float, default=5.0,
                   help="seconds the group runs on after recovering (and resuming)")
    ns = p.parse_args()
    if ns.freeze is None:
        ns.freeze = 4.0 * ns.heartbeat
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / time.strftime("failover-%Y%m%dT%H%M%S.jsonl")
    with LocalNode(name=f"pumpd-bench-failover-{os.getpid()}") as node, \
            tempfile.TemporaryDirectory() as tmp:
        version = node.ctl("version").strip()
        print(f"RabbitMQ {version} private node, {os.cpu_count()} CPUs", flush=True)
        for fault in ns.faults.split(","):
            record(out, one_run(node, fault, ns, Path(tmp)), version)
    return 0


if __name__ == "__main__":
    sys.exit(main())
