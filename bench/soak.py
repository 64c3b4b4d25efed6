"""Soak: many messages through the pumpd daemon while its connections are reset at random.

    python bench/soak.py                          # 1,000,000 messages, 2 shovels, a reset ~every 5 s
    python bench/soak.py --messages 100000 --reset-every 2 --shovels 3 --stall-seconds 3

Two private RabbitMQ nodes (source and destination); each shovel ``sI`` moves queue ``srcI`` on
the source node to queue ``dstI`` on the destination node, and both of its URIs point at a
:class:`pumpd.testing.TcpProxy` of its own. ``python -m pumpd --config ...`` runs the shovels (one
worker each). A publisher thread fills the source queues with numbered messages (in confirm
mode, so every message counted as sent is the broker's) while the shovels move them; a fault
thread resets, every ``--reset-every`` seconds (times a random factor in [0.5, 1.5]), the source,
destination or both connections of a randomly chosen shovel (with ``--stall-seconds``, a third of
these faults are stalls instead). Progress lines go to stdout.

At the end (every message published, the source queues empty and settled) the daemon is stopped
and the destination queues are read back in full: **lost** (published, never arrived),
**duplicates** (arrivals beyond the first) and **reordered** (first arrivals of a shovel's
messages out of their publishing order) are printed, with the shovels' counters and each worker's
RSS (``/proc/PID/status`` VmRSS) when 5 %, 50 % and 100 % of the messages had arrived ("start",
"middle" and "end": the very first moments are left out, while buffers still grow to their
working size). Exit status 1 if anything was lost, a worker's RSS grew by more than 10 % from
start to end, or the soak did not finish within ``--timeout``.

Not part of ``make test``: the 1,000,000-message default takes several minutes on a 2-core host.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pika
from pika import frame as amqp_frame
from pika import spec
from pumpd.testing import TcpProxy
from pumpd.testing.localnode import LocalNode, find_free_port

from common import QueueProbe, _FrameReader, process_tree

VHOST = "soak"
CHUNK = 5000  # messages per publisher write, and per confirm wait
RSS_MARKS = {"start": 0.05, "middle": 0.5, "end": 1.0}
RSS_GROWTH_LIMIT = 0.10


# ------------------------------------------------------------------------------------ publishing


def _body(shovel: int, seq: int, size: int) -> bytes:
    head = b"%d:%010d:" % (shovel, seq)
    return head + b"." * max(size - len(head), 0)


def _parse(body: bytes) -> tuple[int, int]:
    shovel, seq, _ = body.split(b":", 2)
    return int(shovel), int(seq)


class RawPublisher:
    """A confirm-mode publisher on a raw socket: the frames of each message are put together from
    constant parts and the body, so that the soak's publisher keeps ahead of the shovels on a
    small machine (a pika publishing loop would not)."""

    def __init__(self, host: str, port: int, vhost: str) -> None:
        self.sock = socket.create_connection((host, port), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = _FrameReader(self.sock)
        self.sock.sendall(amqp_frame.ProtocolHeader().marshal())
        self.reader.expect(0, spec.Connection.Start)
        self._send(0, spec.Connection.StartOk(client_properties={"product": "pumpd soak"},
                                              mechanism="PLAIN", response="\0guest\0guest"))
        tune = self.reader.expect(0, spec.Connection.Tune)
        assert isinstance(tune, spec.Connection.Tune)
        self._send(0, spec.Connection.TuneOk(channel_max=tune.channel_max,
                                             frame_max=tune.frame_max or 131072, heartbeat=0))
        self._send(0, spec.Connection.Open(virtual_host=vhost))
        self.reader.expect(0, spec.Connection.OpenOk)
        self._send(1, spec.Channel.Open())
        self.reader.expect(1, spec.Channel.OpenOk)
        self._send(1, spec.Confirm.Select())
        self.reader.expect(1, spec.Confirm.SelectOk)
        self.sent = 0

    def _send(self, channel: int, method: Any) -> None:
        self.sock.sendall(amqp_frame.Method(channel, method).marshal())

    def publish(self, queue: str, bodies: list[bytes], persistent: bool) -> None:
        """Publish ``bodies`` (all of one size) to ``queue`` and wait for their confirms."""
        size = len(bodies[0])
        method = amqp_frame.Method(1, spec.Basic.Publish(exchange="", routing_key=queue)).marshal()
        props = spec.BasicProperties(delivery_mode=2 if persistent else 1)
        header = amqp_frame.Header(1, size, props).marshal()
        body_head = struct.pack(">BHI", 3, 1, size)
        self.sock.sendall(b"".join(
            method + header + body_head + b + b"\xce" for b in bodies))
        self.sent += len(bodies)
        confirmed = 0
        while confirmed < self.sent:
            fr = self.reader.next_frame()
            if not isinstance(fr, amqp_frame.Method):
                continue
            if isinstance(fr.method, spec.Basic.Ack):
                confirmed = max(confirmed, fr.method.delivery_tag)
            elif isinstance(fr.method, spec.Basic.Nack):
                raise ConnectionError(f"the broker nacked publish {fr.method.delivery_tag}")
            else:
                raise ConnectionError(f"unexpected {fr.method!r}")

    def close(self) -> None:
        self.sock.close()


@dataclass
class Progress:
    published: int = 0
    publisher_done: bool = False
    publisher_error: str | None = None
    resets: dict[str, int] = field(default_factory=lambda: {"source": 0, "destination": 0})
    stalls: int = 0


def publish_all(node: LocalNode, shovels: int, per_shovel: int, size: int, persistent: bool,
                progress: Progress, stop: threading.Event) -> None:
    pub = RawPublisher("127.0.0.1", node.amqp_port, VHOST)
    try:
        for start in range(0, per_shovel, CHUNK):
            for s in range(shovels):
                if stop.is_set():
                    return
                bodies = [_body(s, i, size) for i in range(start, min(start + CHUNK, per_shovel))]
                pub.publish(f"src{s}", bodies, persistent)
                progress.published += len(bodies)
    except Exception as exc:  # reported by the main loop, which then fails the soak
        progress.publisher_error = f"{type(exc).__name__}: {exc}"
    finally:
        pub.close()
        progress.publisher_done = True


def inject_faults(proxies: list[tuple[TcpProxy, TcpProxy]], every: float, stall: float,
                  rng: random.Random, progress: Progress, stop: threading.Event) -> None:
    """One fault per event, on one shovel's source, destination or both: a reset, or (a third
    of the events, with ``stall`` > 0) a stall of ``stall`` seconds."""
    while not stop.wait(every * rng.uniform(0.5, 1.5)):
        src, dst = rng.choice(proxies)
        side = rng.choice(("source", "destination", "both"))
        if stall > 0 and rng.random() < 1 / 3:
            for proxy in ([src] if side == "source" else [dst] if side == "destination"
                          else [src, dst]):
                proxy.stall(stall)
            progress.stalls += 1
            continue
        if side in ("source", "both"):
            progress.resets["source"] += src.reset_all()
        if side in ("destination", "both"):
            progress.resets["destination"] += dst.reset_all()


# ------------------------------------------------------------------------------ the daemon


def api_shovels(port: int) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/shovels", timeout=10) as r:
        docs: list[dict[str, Any]] = json.loads(r.read())
    return docs


def rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def worker_pids(docs: list[dict[str, Any]]) -> dict[str, int | None]:
    return {f"{d['name']}#{w['index']}": w["pid"] for d in docs for w in d["workers"]}


def unacked_total(node: LocalNode, shovels: int) -> int:
    out = node.ctl("list_queues", "-q", "--no-table-headers", "-p", VHOST, "name",
                   "messages_unacknowledged")
    counts = dict(line.split() for line in out.splitlines() if line.strip())
    return sum(int(counts.get(f"src{s}", 0)) for s in range(shovels))


def stop_daemon(proc: subprocess.Popen[bytes]) -> None:
    pids = process_tree(proc.pid)
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(90)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for pid in pids:  # a worker left behind by a coordinator that had to be killed
        if pid != proc.pid:
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                if b"resource_tracker" not in cmdline and (b"pumpd" in cmdline
                                                           or b"multiprocessing" in cmdline):
                    os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


# ----------------------------------------------------------------------------- reading back


def read_back(uri: str, shovels: int, per_shovel: int) -> dict[str, int]:
    """Consume every destination queue to the end; count lost, duplicates and reordered."""
    counts = [bytearray(per_shovel) for _ in range(shovels)]
    last_first = [-1] * shovels
    reordered = arrived = strange = 0
    conn = pika.BlockingConnection(pika.URLParameters(uri + "?heartbeat=0"))
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=5000)
        for s in range(shovels):
            seen = counts[s]
            for method, _props, body in ch.consume(f"dst{s}", auto_ack=True,
                                                   inactivity_timeout=5):
                if method is None:  # the queue has been empty for 5 s: the daemon is stopped
                    break
                arrived += 1
                try:
                    shovel, seq = _parse(body)
                except ValueError:
                    strange += 1
                    continue
                if shovel != s or not 0 <= seq < per_shovel:
                    strange += 1
                    continue
                if seen[seq] == 0:
                    if seq < last_first[s]:
                        reordered += 1
                    last_first[s] = max(last_first[s], seq)
                seen[seq] = min(seen[seq] + 1, 255)
            ch.cancel()
    finally:
        conn.close()
    lost = sum(c.count(0) for c in counts)
    result = {"arrived": arrived, "lost": lost, "duplicates": arrived - strange - (
        shovels * per_shovel - lost), "reordered": reordered, "strange": strange}
    for s, c in enumerate(counts):  # beyond 255 arrivals of one message the count saturates
        result[f"duplicates s{s}"] = sum(c) - (per_shovel - c.count(0))
    return result


# ----------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=1_000_000, help="in total (default 1,000,000)")
    p.add_argument("--shovels", type=int, default=2, help="default 2")
    p.add_argument("--reset-every", type=float, default=5.0,
                   help="mean seconds between resets (default 5; 0: none)")
    p.add_argument("--stall-seconds", type=float, default=0.0,
                   help="make a third of the faults stalls of this long instead (default 0: "
                        "resets only)")
    p.add_argument("--size", type=int, default=64, help="body bytes (default 64)")
    p.add_argument("--persistent", action="store_true", help="delivery mode 2 (default 1)")
    p.add_argument("--prefetch", type=int, default=1000, help="default 1000")
    p.add_argument("--reconnect-delay", type=float, default=1.0, help="default 1 s")
    p.add_argument("--seed", type=int, default=None, help="for the fault thread's choices")
    p.add_argument("--progress-every", type=float, default=5.0, help="seconds (default 5)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds (default 3600)")
    ns = p.parse_args(argv)
    if not 24 <= ns.size <= 100_000:
        p.error("--size: 24 to 100,000 bytes (the number and one body frame)")
    per_shovel = ns.messages // ns.shovels
    total = per_shovel * ns.shovels
    seed = ns.seed if ns.seed is not None else random.randrange(2**32)
    rng = random.Random(seed)
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])} (seed {seed})", flush=True)

    tag = f"{os.getpid()}"
    nodes = (LocalNode(name=f"pumpd-soak-src-{tag}"), LocalNode(name=f"pumpd-soak-dst-{tag}"))
    with ThreadPoolExecutor(2) as pool:
        for f in [pool.submit(n.start) for n in nodes]:
            f.result()
    src_node, dst_node = nodes
    stop = threading.Event()
    proxies: list[tuple[TcpProxy, TcpProxy]] = []
    proc: subprocess.Popen[bytes] | None = None
    failures: list[str] = []
    try:
        for n in nodes:
            n.add_vhost(VHOST)
        src_probe, dst_probe = QueueProbe(src_node.uri(VHOST)), QueueProbe(dst_node.uri(VHOST))
        for s in range(ns.shovels):
            src_probe.channel.queue_declare(f"src{s}", durable=True)
            dst_probe.channel.queue_declare(f"dst{s}", durable=True)
        shovels: dict[str, Any] = {}
        for s in range(ns.shovels):
            pair = (TcpProxy("127.0.0.1", src_node.amqp_port).start(),
                    TcpProxy("127.0.0.1", dst_node.amqp_port).start())
            proxies.append(pair)
            shovels[f"s{s}"] = {
                "sources": {"broker": f"amqp://guest:guest@127.0.0.1:{pair[0].port}/{VHOST}"},
                "destinations": {"broker": f"amqp://guest:guest@127.0.0.1:{pair[1].port}/{VHOST}"},
                "queue": f"src{s}",
                "prefetch_count": ns.prefetch,
                "reconnect_delay": ns.reconnect_delay,
                "publish_fields": {"exchange": "", "routing_key": f"dst{s}"},
                **({"publish_properties": {"delivery_mode": 2}} if ns.persistent else {}),
            }
        workdir = Path(tempfile.mkdtemp(prefix="pumpd-soak-"))
        config = workdir / "shovels.json"
        config.write_text(json.dumps({"shovels": shovels}, indent=2))
        port = find_free_port()
        log_path = workdir / "pumpd.log"
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "pumpd", "--config", str(config), "--http-open-reads", "--http",
                 f"127.0.0.1:{port}", "--log-format", "json", "--state-file",
                 str(workdir / "shovels.runtime.json")],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        print(f"{ns.shovels} shovels, {total:,} messages of {ns.size} B "
              f"({'persistent' if ns.persistent else 'transient'}), a reset every "
              f"~{ns.reset_every:g} s; pumpd pid {proc.pid}, log {log_path}", flush=True)

        progress = Progress()
        threads = [threading.Thread(target=publish_all, daemon=True, args=(
            src_node, ns.shovels, per_shovel, ns.size, ns.persistent, progress, stop))]
        if ns.reset_every > 0:
            threads.append(threading.Thread(target=inject_faults, daemon=True, args=(
                proxies, ns.reset_every, ns.stall_seconds, random.Random(rng.random()),
                progress, stop)))
        for t in threads:
            t.start()

        began = time.monotonic()
        rss: dict[str, dict[str, tuple[int | None, int | None]]] = {}  # mark -> worker -> (pid, kB)
        pids_seen: dict[str, set[int]] = {}
        next_line = began
        docs: list[dict[str, Any]] = []
        while True:
            now = time.monotonic()
            if now - began > ns.timeout:
                failures.append(f"not finished within {ns.timeout:g} s")
                break
            if proc.poll() is not None:
                failures.append(f"pumpd exited with status {proc.returncode}")
                break
            if progress.publisher_error:
                failures.append(f"publisher: {progress.publisher_error}")
                break
            try:
                docs = api_shovels(port)
            except OSError:
                time.sleep(0.5)
                continue
            for name, pid in worker_pids(docs).items():
                if pid:
                    pids_seen.setdefault(name, set()).add(pid)
            arrived = sum(dst_probe.depth(f"dst{s}")[0] for s in range(ns.shovels))
            for mark, fraction in RSS_MARKS.items():
                if mark not in rss and arrived >= fraction * total:
                    rss[mark] = {n: (pid, rss_kib(pid) if pid else None)
                                 for n, pid in worker_pids(docs).items()}
            if now >= next_line:
                next_line = now + ns.progress_every
                workers = " ".join(
                    f"{n} {(rss_kib(pid) or 0) / 1024:.1f}MB" for n, pid in worker_pids(docs).items()
                    if pid)
                states = ",".join(d["state"] for d in docs)
                print(f"[{now - began:7.1f}s] published {progress.published:,}/{total:,}  "
                      f"arrived {arrived:,} ({arrived / max(now - began, 1e-9):,.0f}/s)  resets "
                      f"src {progress.resets['source']} dst {progress.resets['destination']} "
                      f"stalls {progress.stalls}  "
                      f"states {states}  RSS {workers}", flush=True)
            # Done when the sources are settled: nothing ready, nothing delivered and unacked
            # (what pumpd holds, publishes or waits confirms for is unacked at the source).
            if (progress.publisher_done
                    and all(src_probe.depth(f"src{s}")[0] == 0 for s in range(ns.shovels))
                    and all(d["counters"]["in_flight"] == 0 for d in docs)
                    and unacked_total(src_node, ns.shovels) == 0
                    and all(src_probe.depth(f"src{s}")[0] == 0 for s in range(ns.shovels))):
                break
            time.sleep(0.5)
        stop.set()
        time.sleep(1)  # the workers' counters reach the status a few times a second
        try:
            docs = api_shovels(port)
        except OSError:
            pass
        if "end" not in rss and docs:
            rss["end"] = {n: (pid, rss_kib(pid) if pid else None)
                          for n, pid in worker_pids(docs).items()}
        elapsed = time.monotonic() - began
        stop_daemon(proc)
        src_probe.close()
        dst_probe.close()
        print(f"\nfinished in {elapsed:.1f} s; reading the destination queues back ...", flush=True)
        result = read_back(dst_node.uri(VHOST), ns.shovels, per_shovel)
        print(f"published {total:,}  arrived {result['arrived']:,}  lost {result['lost']:,}  "
              f"duplicates {result['duplicates']:,}  reordered {result['reordered']:,}  "
              f"unrecognised {result['strange']:,}")
        print(f"connections reset: source {progress.resets['source']}, destination "
              f"{progress.resets['destination']}; stalls {progress.stalls}")
        for d in docs:
            c = d["counters"]
            dups = result.get(f"duplicates {d['name']}", 0)
            print(f"shovel {d['name']}: {dups:,} duplicates "
                  f"({'<=' if dups <= c['redelivered'] else 'MORE THAN'} its redelivered "
                  f"counter); worker restarts {d.get('restarts', 0)}; counters " + ", ".join(f"{k} {v:,}" for k, v in c.items()))
        print("worker RSS (MB) at " + ", ".join(
            f"{m} ({int(f * 100)} % arrived)" for m, f in RSS_MARKS.items()) + ":")
        for name in sorted({n for marks in rss.values() for n in marks}):
            cells = []
            for mark in RSS_MARKS:
                pid, kib = rss.get(mark, {}).get(name, (None, None))
                cells.append(f"{mark} {kib / 1024:.1f}" if kib else f"{mark} -")
            restarted = len(pids_seen.get(name, ())) > 1
            print(f"  {name}: " + ", ".join(cells)
                  + (f"  (pids {sorted(pids_seen[name])}: restarted)" if restarted else ""))
            first = rss.get("start", {}).get(name, (None, None))
            last = rss.get("end", {}).get(name, (None, None))
            if first[1] and last[1] and first[0] == last[0] and \
                    last[1] > first[1] * (1 + RSS_GROWTH_LIMIT):
                failures.append(f"{name} RSS grew {last[1] / first[1] - 1:.0%} from start to end")
        if result["lost"]:
            failures.append(f"{result['lost']:,} messages lost")
    finally:
        stop.set()
        if proc is not None and proc.poll() is None:
            stop_daemon(proc)
        for pair in proxies:
            for proxy in pair:
                proxy.stop()
        for n in nodes:
            n.close(graceful=False)
    for f in failures:
        print(f"FAILED: {f}")
    if not failures:
        print("OK: nothing lost, worker RSS within 10 % from start to end")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
