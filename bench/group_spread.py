"""Even spread and failover of a group of daemons with a coordination broker (the
targets: 3 daemons, 30 shovels, spread 10 +- 1 each within 60 s of the last member starting;
``kill -9`` of a member: its positions running elsewhere within 10 s).

``--members`` daemons (default 3) run the same configuration: ``--shovels`` shovels (default 30)
from their own queue to their own queue on one private RabbitMQ node, and a ``cluster`` clause
whose ``coordination_uri`` is that node (default timing: poll 1 s, settle 10 s, grace 10 s;
``--poll``, ``--settle``, ``--grace``). Each member runs its positions in worker processes of
``--per-process`` positions (default 10: 3 x 30 one-position processes would measure the
machine, not pumpd). A publisher sends numbered messages round robin to the source queues at
``--rate`` messages/s from before the first member starts. The members start ``--stagger``
seconds apart (default 2).

Everything is read from the broker, never from pumpd's status: a pump's connections are named
``pumpd SHOVEL#I member ID``, so ``rabbitmqctl list_consumers`` -> ``list_channels`` ->
``list_connections`` says which member consumes each source queue.

Reported: seconds from the last member's start until every source queue has exactly one
consumer and every member consumes within 1 of P / M (``seconds_to_spread``); the most
consumers any source queue had at any check (``most_consumers_per_queue``: 1 means never two at
once); after the fault of member 0 (``--fault kill``: ``kill -9`` of the coordinator and its
workers; ``--fault stop``: SIGSTOP of its process group for ``--freeze`` seconds): seconds until
every source queue has one consumer again (``seconds_to_all_consumed_after_fault``), and until
the survivors are spread +-1 again; how many of the survivors' own queues changed consumer
channel by then (``healthy_moved_on_leave``: a position that moved, even away and back, has
another channel); then member 0 back (restarted after a kill, SIGCONT after a freeze): seconds
until the spread is even over all members again, how many survivors' queues had changed
consumer by then (``healthy_moved_on_return``) and how many of member 0's queues it consumes
again (``own_back``); messages sent, lost and duplicated once the source queues are empty.
``--source-heartbeat N`` puts ``heartbeat=N`` on the shovels' source URIs only (the
coordination URI keeps the default).

    python bench/group_spread.py
    python bench/group_spread.py --members 3 --shovels 30 --settle 5 --grace 5
    python bench/group_spread.py --fault stop --source-heartbeat 5

Every run is a JSON line in ``bench/results/group-spread-<time>.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pika
from pumpd.supervisor.membership import member_id
from pumpd.testing.localnode import LocalNode

from common import record
from failover import RESULTS, Member, Publisher, arrivals, shovel


def queue_rows(node: LocalNode, vhost: str) -> dict[str, tuple[int, int]]:
    """``{queue: (messages, consumers)}`` from the broker itself (``rabbitmqctl``: the consumer
    count as the broker keeps it, whoever the consumers are)."""
    out = node.ctl("list_queues", "-q", "--no-table-headers", "-p", vhost, "name", "messages",
                   "consumers")
    rows = {}
    for line in out.splitlines():
        name, messages, consumers = line.split("\t")
        rows[name] = (int(messages), int(consumers))
    return rows


def rows(node: LocalNode, *args: str) -> list[list[str]]:
    out = node.ctl(*args, "-q", "--no-table-headers")
    return [line.split("\t") for line in out.splitlines() if line]


def consumers(node: LocalNode, vhost: str) -> dict[str, list[str]]:
    """For each queue, the member of each of its consumers, as the broker lists them."""
    channels = dict(rows(node, "list_channels", "pid", "connection"))
    names = {}
    for pid, props in rows(node, "list_connections", "pid", "client_properties"):
        m = re.search(r'"connection_name","pumpd [^"]* member ([^" ]+)', props)
        names[pid] = m.group(1) if m else "?"
    out: dict[str, list[str]] = {}
    for queue, channel in rows(node, "list_consumers", "-p", vhost, "queue_name", "channel_pid"):
        out.setdefault(queue, []).append(names.get(channels.get(channel, ""), "?"))
    return out


def channels(node: LocalNode, vhost: str) -> dict[str, list[str]]:
    """For each queue, its consumers' channel pids, as the broker lists them."""
    out: dict[str, list[str]] = {}
    for queue, channel in rows(node, "list_consumers", "-p", vhost, "queue_name", "channel_pid"):
        out.setdefault(queue, []).append(channel)
    return out


def spread(by_queue: dict[str, list[str]], srcs: list[str], members: int) -> Counter[str] | None:
    """The load per member when each source queue has one consumer and every one of
    ``members`` members is within 1 of the even share; else None."""
    holders = [by_queue.get(q, []) for q in srcs]
    if any(len(h) != 1 for h in holders):
        return None
    load = Counter(h[0] for h in holders)
    share = len(srcs) / members
    if len(load) != members or any(abs(n - share) > 1 for n in load.values()):
        return None
    return load


def until_spread(node: LocalNode, vhost: str, srcs: list[str], members: int, start: float,
                 limit: float, most: list[int]) -> float | None:
    """Seconds from ``start`` until :func:`spread` holds (None: not within ``limit``)."""
    while time.monotonic() - start < limit:
        by_queue = consumers(node, vhost)
        most[0] = max(most[0], *(len(by_queue.get(q, [])) for q in srcs))
        if spread(by_queue, srcs, members) is not None:
            return round(time.monotonic() - start, 2)
        time.sleep(0.25)
    return None


def run(node: LocalNode, ns: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    vhost = f"group-spread-{os.getpid()}-{int(time.time())}"
    node.add_vhost(vhost)
    uri = node.uri(vhost)
    config = workdir / "group.json"
    src_uri = f"{uri}?heartbeat={ns.source_heartbeat}" if ns.source_heartbeat else uri
    config.write_text(json.dumps({
        "cluster": {"name": "bench", "coordination_uri": uri, "poll_interval": ns.poll,
                    "settle": ns.settle, "grace": ns.grace, "lease_retry": ns.lease_retry},
        "shovels": {f"s{i}": shovel(src_uri, uri, i) for i in range(ns.shovels)}}))
    srcs = [f"src{i}" for i in range(ns.shovels)]
    conn = pika.BlockingConnection(pika.URLParameters(uri))  # the publisher starts first
    for q in srcs:
        conn.channel().queue_declare(q, durable=True)
    conn.close()
    pub = Publisher(uri, ns.shovels, ns.rate)
    pub.start()
    members: list[Member] = []
    most = [0]
    try:
        for n in range(ns.members):
            members.append(Member(workdir, n, config, ("--shovels-per-process",
                                                       str(ns.per_process))))
            if n < ns.members - 1:
                time.sleep(ns.stagger)
        last_start = time.monotonic()
        to_spread = until_spread(node, vhost, srcs, ns.members, last_start, ns.limit, most)
        time.sleep(ns.warmup)
        victim = member_id(str(workdir / "member0.state.json"))
        before = channels(node, vhost)
        own = [q for q, who in consumers(node, vhost).items() if q in srcs and who == [victim]]
        healthy = [q for q in srcs if q not in own]
        if ns.fault == "kill":
            members[0].kill()
        else:
            os.killpg(members[0].proc.pid, signal.SIGSTOP)
        killed = time.monotonic()
        to_consumed = None
        while time.monotonic() - killed < ns.limit:
            # one consumer on each queue, and on member 0's a new one (a frozen member's
            # consumer stays listed until the broker gives up on its connection)
            now = channels(node, vhost)
            most[0] = max(most[0], *(len(now.get(q, [])) for q in srcs))
            if all(len(now.get(q, [])) == 1 for q in srcs) and all(
                    now[q] != before.get(q) for q in own):
                to_consumed = round(time.monotonic() - killed, 2)
                break
            time.sleep(0.1)
        to_respread = until_spread(node, vhost, srcs, ns.members - 1, killed, ns.limit, most)
        now = channels(node, vhost)
        moved_on_leave = sum(1 for q in healthy if now.get(q) != before.get(q))
        if ns.fault == "kill":
            members[0] = Member(workdir, 0, config, ("--shovels-per-process",
                                                     str(ns.per_process)))
        else:
            time.sleep(max(0.0, killed + ns.freeze - time.monotonic()))
            os.killpg(members[0].proc.pid, signal.SIGCONT)
        back = time.monotonic()
        to_back = until_spread(node, vhost, srcs, ns.members, back, ns.limit, most)
        now = channels(node, vhost)
        moved_on_return = sum(1 for q in healthy if now.get(q) != before.get(q))
        own_back = sum(1 for q, who in consumers(node, vhost).items()
                       if q in own and who == [victim])
        time.sleep(ns.warmup)
        pub.halt.set()
        pub.join(30)
        deadline = time.monotonic() + 120
        while any(queue_rows(node, vhost)[q][0] for q in srcs) and time.monotonic() < deadline:
            time.sleep(0.5)
        for m in members:
            m.stop()
        lost, dups = arrivals(uri, pub.sent)
        return {"bench": "group_spread", "members": ns.members, "shovels": ns.shovels,
                "poll_s": ns.poll, "settle_s": ns.settle, "grace_s": ns.grace,
                "stagger_s": ns.stagger, "rate": ns.rate,
                "seconds_to_spread": to_spread, "most_consumers_per_queue": most[0],
                "fault": ns.fault, "freeze_s": ns.freeze,
                "source_heartbeat_s": ns.source_heartbeat,
                "seconds_to_all_consumed_after_fault": to_consumed,
                "seconds_to_spread_after_fault": to_respread,
                "healthy_moved_on_leave": moved_on_leave, "own": len(own),
                "seconds_to_spread_after_return": to_back,
                "healthy_moved_on_return": moved_on_return, "own_back": own_back,
                "sent": sum(pub.sent), "lost": lost, "duplicates": dups}
    finally:
        pub.halt.set()
        for m in members:
            if m.proc.poll() is None:
                m.kill()
        node.delete_vhost(vhost)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--members", type=int, default=3)
    p.add_argument("--shovels", type=int, default=30)
    p.add_argument("--per-process", type=int, default=10)
    p.add_argument("--rate", type=float, default=300.0, help="messages/s in all")
    p.add_argument("--stagger", type=float, default=2.0)
    p.add_argument("--poll", type=float, default=1.0)
    p.add_argument("--settle", type=float, default=10.0)
    p.add_argument("--grace", type=float, default=10.0)
    p.add_argument("--lease-retry", type=float, default=2.0)
    p.add_argument("--warmup", type=float, default=5.0)
    p.add_argument("--limit", type=float, default=120.0, help="seconds to wait for a spread")
    p.add_argument("--fault", choices=("kill", "stop"), default="kill")
    p.add_argument("--freeze", type=float, default=30.0, help="seconds member 0 is stopped")
    p.add_argument("--source-heartbeat", type=int, default=0,
                   help="heartbeat= on the source URIs (0: none, the broker's)")
    ns = p.parse_args()
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / time.strftime("group-spread-%Y%m%dT%H%M%S.jsonl")
    with LocalNode(name=f"pumpd-bench-spread-{os.getpid()}") as node, \
            tempfile.TemporaryDirectory() as tmp:
        version = node.ctl("version").strip()
        print(f"RabbitMQ {version} private node, {os.cpu_count()} CPUs", flush=True)
        record(out, run(node, ns, Path(tmp)), version)
    return 0


if __name__ == "__main__":
    sys.exit(main())
