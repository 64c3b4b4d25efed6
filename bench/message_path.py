"""Count the modules one delivered message's walk passes through, from ``engine.pump.Pump.run``.

Runs one shovel (``Pump.run``, the daemon worker's entry into the engine) between two queues of
a RabbitMQ at ``--uri`` (a manual check: the local broker, not a test), lets it settle, then
publishes one message from another thread with the profiler (``sys.setprofile``) on the event
loop's thread until that message is acknowledged at the source. Every call into, and every return
to, a pumpd module (the native relay included, as ``_fastpath``) is a step of the walk; steps in
the module already current are one stop. The walk starts with the await chain that runs the
session (``Pump.run`` down to the session's ``wait``), then the loop's callbacks the message
causes, in order. The data plane is the reference (the profiler does not see calls into Cython),
its modules counted as one, as the native plane is one module. Callbacks of the counter reporter and the backlog reader are left out (they run
on a timer whether or not a message passes).

    PUMPD_IMPLEMENTATION=reference python bench/message_path.py [--uri amqp://guest:guest@127.0.0.1:5672/%2F]

Prints the stops, then: stops, modules, returns to a module already visited (stops - modules),
how many times session.py was entered, and every pumpd function called on the way (a function
called within its own module is no new stop, but it is a frame the message passes).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
import time
from types import FrameType
from typing import Any

import pika
import pumpd
import uvloop
from pumpd.config.parse import parse_config
from pumpd.engine.pump import Pump
from pumpd.engine.status import Counters, State

PACKAGE = os.path.dirname(pumpd.__file__) + os.sep
QUEUES = ("pumpd-message-path-src", "pumpd-message-path-dst")
LEFT_OUT = ("_report_counters", "_read_backlog", "counters", "_levels")


def module_of(frame: FrameType, event: str, arg: Any) -> str | None:
    """The pumpd module a profiler event runs in, or None for any other code."""
    if event in ("c_call", "c_return"):
        name = getattr(arg, "__module__", None) or getattr(getattr(arg, "__self__", None),
                                                          "__module__", None) or ""
        return "dataplane (relay)" if "_fastpath" in str(name) else None
    path = frame.f_code.co_filename
    if not path.startswith(PACKAGE):
        return None
    module = path[len(PACKAGE):]
    # the reference data plane is one module to the engine, as the native one is
    return "dataplane (relay)" if module.startswith("dataplane/") else module


class Walk:
    def __init__(self) -> None:
        self.stops: list[tuple[str, str]] = []
        self.entries: list[tuple[str, str]] = []  # every pumpd function called on the way
        self.on = False

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.on:
            return
        if event in ("call", "c_call"):
            where = module_of(frame, event, arg)
            name = (getattr(arg, "__qualname__", "?") if event == "c_call"
                    else frame.f_code.co_qualname)
        else:  # a return: back in the caller's module
            caller = frame.f_back
            if caller is None or event == "c_return":
                where, name = module_of(frame, "call", None), frame.f_code.co_qualname
            else:
                where, name = module_of(caller, "call", None), caller.f_code.co_qualname
        if where is None or any(n in name.split(".")[-1] for n in LEFT_OUT):
            return
        if event in ("call", "c_call"):
            self.entries.append((where, name))
        if not self.stops or self.stops[-1][0] != where:
            self.stops.append((where, name))


class Sink:
    def __init__(self) -> None:
        self.state: State | None = None
        self.counters = Counters()

    def state_changed(self, state: State, reason: str | None, at: float) -> None:
        self.state = state

    def counters_changed(self, counters: Counters) -> None:
        self.counters = counters


def publish_one(uri: str) -> None:
    with pika.BlockingConnection(pika.URLParameters(uri)) as conn:
        conn.channel().basic_publish("", QUEUES[0], b"one message")


async def main(uri: str) -> Walk:
    with pika.BlockingConnection(pika.URLParameters(uri)) as conn:
        ch = conn.channel()
        for q in QUEUES:
            ch.queue_delete(q)
    cfg = parse_config({"shovels": {"path": {
        "src-uri": uri, "src-queue": QUEUES[0], "dest-uri": uri, "dest-queue": QUEUES[1],
        "ack-mode": "on-confirm"}}}).shovels["path"]
    sink, stop, walk = Sink(), asyncio.Event(), Walk()
    task = asyncio.create_task(Pump(cfg, sink).run(stop))
    while sink.state != State.RUNNING:
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)
    # the await chain that runs the session, as it stands while it waits for messages
    walk.stops += [("engine/pump.py", "Pump.run"), ("engine/session.py", "Session.wait")]
    sys.setprofile(walk.profile)
    walk.on = True
    threading.Thread(target=publish_one, args=(uri,)).start()
    deadline = time.monotonic() + 10
    pump = task.get_coro().cr_frame.f_locals["self"]  # type: ignore[union-attr]
    while time.monotonic() < deadline:
        walk.on = False
        acked = pump.counters().acked
        walk.on = True
        if acked >= 1:
            break
        await asyncio.sleep(0.01)
    walk.on = False
    sys.setprofile(None)
    stop.set()
    await task
    return walk


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uri", default="amqp://guest:guest@127.0.0.1:5672/%2F")
    args = parser.parse_args()
    result = uvloop.run(main(args.uri))  # pumpd's loop (the links need it)
    for module, function in result.stops:
        print(f"{module:28} {function}")
    modules = {m for m, _ in result.stops}
    print(f"stops {len(result.stops)}, modules {len(modules)}, returns to a module already "
          f"visited {len(result.stops) - len(modules)}, session.py entered "
          f"{sum(m == 'engine/session.py' for m, _ in result.stops)} times")
    session = [f for m, f in result.entries if m == "engine/session.py"]
    print(f"functions called {len(result.entries)}, of them in session.py {len(session)}: "
          + ", ".join(session))
