"""``--shovels-per-process K``: several shovels' workers in one worker host process,
each still supervised, reported and changed on its own."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from functools import partial
from typing import Any

from pumpd.testing.localnode import LocalNode

from tests.support.amqp_helpers import queue_depth
from tests.support.daemon_helpers import (
    Daemon,
    fill_queue,
    named_shovel,
    pid_alive,
    running_state,
    settled,
    shovel_def,
)


def _worker(d: Daemon, name: str) -> dict[str, Any]:
    doc = d.shovel(name)
    assert doc is not None
    (w,) = doc["workers"]
    return dict(w)


def _all_running(d: Daemon, n: int) -> bool:
    docs = d.shovels()
    return len(docs) == n and all(doc["state"] == "running" and doc["workers_running"] == 1
                                  for doc in docs)


def test_200_shovels_in_two_hosts_move_everything_and_a_killed_host_comes_back(
    pumpd_daemon, node_a: LocalNode, node_b: LocalNode, vhost_a: str, vhost_b: str
) -> None:
    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    n = 200
    names = [f"q{i:03d}" for i in range(n)]
    d = pumpd_daemon({q: shovel_def(src, q, dst, q) for q in names},
                     "--shovels-per-process", "100")
    d.wait_for(lambda: _all_running(d, n), 90, "200 shovels running")
    overview = d.get("/api/overview")
    assert (overview["workers"], overview["worker_processes"]) == (n, 2)
    pids = {q: _worker(d, q)["pid"] for q in names}
    assert len(set(pids.values())) == 2

    for i, q in enumerate(names):
        fill_queue(src, q, [b"%s-%d" % (q.encode(), j) for j in range(i % 7 + 1)])

    def moved(expected: dict[str, int]) -> bool:
        docs = {doc["name"]: doc for doc in d.shovels()}
        return all(docs[q]["counters"]["acked"] == k for q, k in expected.items())

    d.wait_for(lambda: moved({q: i % 7 + 1 for i, q in enumerate(names)}), 60, "all moved")
    for i, q in enumerate(names):
        assert queue_depth(dst, q)[0] == i % 7 + 1, q

    # SIGKILL one host: each of its shovels restarts and says why; the other host's are untouched
    victim = pids["q000"]
    hosted = [q for q in names if pids[q] == victim]
    others = [q for q in names if pids[q] != victim]
    assert len(hosted) == 100
    os.kill(victim, signal.SIGKILL)

    def back() -> bool:
        docs = {doc["name"]: doc for doc in d.shovels()}
        return all(docs[q]["state"] == "running" and docs[q]["workers"][0]["restarts"] == 1
                   and docs[q]["workers"][0]["pid"] not in (None, victim) for q in hosted)

    d.wait_for(back, 90, "the killed host's shovels running again")
    for q in hosted[:5]:
        assert "SIGKILL" in _worker(d, q)["last_exit"]
    for q in others:
        w = _worker(d, q)
        assert (w["pid"], w["restarts"], w["counters"]["reconnects"]) == (pids[q], 0, 0), q

    for q in (hosted[0], hosted[-1], others[0]):
        fill_queue(src, q, [b"after"])
    d.wait_for(lambda: all(queue_depth(dst, q)[0] == names.index(q) % 7 + 2
                           for q in (hosted[0], hosted[-1], others[0])), 30, "still moving")
    assert d.stop(60) == 0


def test_runtime_changes_touch_only_their_shovel_in_a_shared_host(
    pumpd_daemon, node_a: LocalNode, vhost_a: str
) -> None:
    uri = node_a.uri(vhost_a)

    s = partial(named_shovel, uri)

    d = pumpd_daemon({"a": s("a"), "b": s("b"), "c": s("c"), "alone": s("alone", own_process=True),
                      "pair": s("pair", workers=2)}, "--shovels-per-process", "10")
    for name in ("a", "b", "c", "alone"):
        d.wait_for(lambda name=name: running_state(d, name), 30, f"{name} running")
    d.wait_for(lambda: running_state(d, "pair", 2), 30, "pair running")
    pid = _worker(d, "a")["pid"]
    assert _worker(d, "b")["pid"] == _worker(d, "c")["pid"] == pid
    assert _worker(d, "alone")["pid"] != pid  # own_process: a process of its own
    pair = d.worker_pids("pair")
    assert len(set(pair)) == 2  # competing consumers in different hosts
    before = {n: _worker(d, n) for n in ("a", "c")}

    # a run-time shovel joins the host; deleting it drains it alone
    status, _doc = d.request("PUT", "/api/shovels/rt", {"value": s("rt")})
    assert status == 201
    d.wait_for(lambda: running_state(d, "rt"), 30, "rt running")
    assert _worker(d, "rt")["pid"] in (pid, *pair)
    status, _doc = d.request("DELETE", "/api/shovels/rt")
    assert status == 204
    d.wait_for(lambda: d.shovel("rt") is None, 30, "rt gone")
    assert settled(node_a, vhost_a, "rt-in") == (0, 0, 0)

    # SIGHUP with "b" changed: only "b" restarts, in its host
    d.write_config({"a": s("a"), "b": s("b", prefetch_count=10), "c": s("c"),
                    "alone": s("alone", own_process=True), "pair": s("pair", workers=2)})
    d.signal(signal.SIGHUP)
    d.wait_for(lambda: running_state(d, "b") and d.shovel("b")["prefetch_count"] == 10
               and _worker(d, "b")["restarts"] == 1, 30, "b restarted")
    for n in ("a", "c"):
        w = _worker(d, n)
        assert (w["pid"], w["started"], w["restarts"], w["counters"]["reconnects"]) == \
            (pid, before[n]["started"], 0, 0), n

    # POST restart of one shovel leaves its host-mates alone too
    status, _doc = d.request("POST", "/api/shovels/c/restart")
    assert status == 202
    d.wait_for(lambda: running_state(d, "c") and _worker(d, "c")["restarts"] == 1, 30,
               "c restarted")
    assert _worker(d, "a")["started"] == before["a"]["started"]

    for n in ("a", "b", "c"):
        fill_queue(uri, f"{n}-in", [b"x", b"y"])
    d.wait_for(lambda: all(queue_depth(uri, f"{n}-out")[0] == 2 for n in ("a", "b", "c")), 30,
               "messages moving")
    metrics = d.get("/metrics")
    for n in ("a", "b", "c", "alone"):
        assert f'shovel="{n}"' in metrics
    # a hosted shovel's own log lines name it, as a worker process's do
    hosted_lines = [e for e in d.log_events()
                    if e.get("process") == "worker-host" and e.get("shovel") == "b"]
    assert any(e["message"] == "shovel b: running" for e in hosted_lines), hosted_lines[:5]
    assert d.stop(60) == 0
    assert settled(node_a, vhost_a, "a-in") == (0, 0, 0)


def test_a_hung_host_is_replaced_with_all_its_shovels_and_hosts_exit_without_a_coordinator(
    pumpd_daemon, node_a: LocalNode, vhost_a: str
) -> None:
    uri = node_a.uri(vhost_a)
    names = ("a", "b", "c")
    d = pumpd_daemon({n: named_shovel(uri, n) for n in names},
                     "--shovels-per-process", "3", "--heartbeat-timeout", "3")
    for n in names:
        d.wait_for(lambda n=n: running_state(d, n), 30, f"{n} running")
    (host,) = {_worker(d, n)["pid"] for n in names}
    status = subprocess.run([sys.executable, "-m", "pumpd", "status", "--http",
                             f"127.0.0.1:{d.port}"], capture_output=True, text=True, timeout=30)
    assert status.returncode == 0 and all(n in status.stdout for n in names), status.stdout

    os.kill(host, signal.SIGSTOP)  # alive, but its event loop (every hosted shovel's) stopped
    try:
        def replaced() -> bool:
            ws = [_worker(d, n) for n in names]
            return all(w["pid"] not in (None, host) and w["state"] == "running"
                       and w["restarts"] == 1 for w in ws)

        d.wait_for(replaced, 60, "the three shovels in a new host")
    finally:
        if pid_alive(host):
            os.kill(host, signal.SIGCONT)
    for n in names:
        assert "killed by pumpd" in _worker(d, n)["last_exit"]
        assert "no heartbeat" in _worker(d, n)["last_exit"]
    (new_host,) = {_worker(d, n)["pid"] for n in names}
    fill_queue(uri, "b-in", [b"after"])
    d.wait_for(lambda: queue_depth(uri, "b-out")[0] == 1, 30, "moving again")

    # the coordinator killed: the host notices, drains and exits
    d.remember_workers()
    assert d.proc is not None
    d.proc.kill()
    d.proc.wait(10)
    deadline = time.monotonic() + 30
    while pid_alive(new_host) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_alive(new_host), "an orphaned host kept running"
    for n in names:
        assert settled(node_a, vhost_a, f"{n}-in") == (0, 0, 0)


def test_the_command_line_wins_over_the_files_shovels_per_process(
    pumpd_daemon, node_a: LocalNode, vhost_a: str
) -> None:
    uri = node_a.uri(vhost_a)
    shovels = {n: named_shovel(uri, n) for n in ("a", "b", "c")}
    for args, expected in (((), 2), (("--shovels-per-process", "3"), 3)):
        d = pumpd_daemon(shovels, *args, start=False)
        d.config_path.write_text(json.dumps({"shovels": shovels, "shovels_per_process": 2}))
        d.start()
        d.wait_for(lambda d=d: _all_running(d, 3), 30, "the shovels running")
        overview = d.get("/api/overview")
        assert overview["shovels_per_process"] == expected
        assert overview["worker_processes"] == (2 if expected == 2 else 1)
        assert d.stop() == 0

