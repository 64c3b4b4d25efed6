"""``pumpd plan-migration``: a vhost's queues, read from the management API, as a pumpd plan.

One shovel per queue of the source vhost: it consumes the queue as it is (no source
declaration: the queue exists, and declaring it again could only fail on a mismatch), declares
the queue alike on the destination (durability, auto-delete, type and every argument, as the
management API reports them) and publishes each message to the default exchange with the
queue's name, so it lands in the queue of the same name, ``on_confirm``. The plan is printed as
a configuration file in the static form, sorted by queue name, to be read and edited before it
runs.

Left out, with a note on stderr: exclusive queues (owned by one connection of the source, no
other can consume them) and server-named ones (``amq.gen-...``: their name is chosen anew each
time the application declares them). Streams are planned with a consumer offset (``"first"``):
a stream keeps its messages when they are read, so its shovel copies it and then follows it.

The management API is read by :mod:`.management_api` (one request, the source URI's user and
password over https only unless ``--management-insecure-http`` says plain http is fine).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..config.clauses import DEFAULT_PREFETCH
from ..config.limits import MAX_SHOVELS_PER_PROCESS
from .import_errors import JSON

__all__ = ["Plan", "plan_migration", "shovels_per_process_for"]

PROG = "pumpd plan-migration"
# One process per shovel up to this many shovels (pumpd's default, the safest); beyond it a plan
# packs them (a few dozen idle worker processes already cost a gigabyte of memory).
PACK_ABOVE = 24
# When packing: at least this many shovels per process, and no more than this many processes
# (each process still gives every shovel its own connections, so a process of 60 is fine).
MIN_PER_PROCESS = 25
MAX_PROCESSES = 16
SERVER_NAMED_PREFIX = "amq.gen-"


@dataclass
class Plan:
    """What :func:`plan_migration` made of a vhost's queues."""

    document: dict[str, JSON]  # the configuration file
    notes: list[str] = field(default_factory=list)  # for stderr
    planned: int = 0
    skipped: dict[str, int] = field(default_factory=dict)  # why -> how many queues
    filtered: int = 0  # left out by --include / --exclude

    def summary(self) -> str:
        skipped = sum(self.skipped.values())
        why = ", ".join(f"{n} {reason}" for reason, n in sorted(self.skipped.items()))
        line = (f"{self.planned} shovel{'s' if self.planned != 1 else ''} planned, "
                f"{skipped} skipped" + (f" ({why})" if why else ""))
        if self.filtered:
            line += f", {self.filtered} left out by --include/--exclude"
        return line


# ============================================================================================
# The plan


def _shovel_name(queue: str, taken: set[str]) -> str:
    """The queue's name, made a usable shovel name: control characters (which a shovel name may
    not hold) become '_', and a clash gets a numbered suffix."""
    base = "".join("_" if ord(c) < 0x20 or ord(c) == 0x7F else c for c in queue)
    if not base.strip():
        base = "queue"
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}~{n}"
    taken.add(name)
    return name


def shovels_per_process_for(count: int) -> int | None:
    """The plan's ``shovels_per_process``: None (one process each) up to :data:`PACK_ABOVE`
    shovels, else at least :data:`MIN_PER_PROCESS` per process and at most
    :data:`MAX_PROCESSES` processes."""
    if count <= PACK_ABOVE:
        return None
    return min(MAX_SHOVELS_PER_PROCESS, max(MIN_PER_PROCESS, math.ceil(count / MAX_PROCESSES)))


def _destination_declaration(queue: dict[str, JSON]) -> dict[str, JSON]:
    name = queue["name"]
    fields: dict[str, JSON] = {"queue": name, "durable": bool(queue.get("durable", True))}
    if queue.get("auto_delete"):
        fields["auto_delete"] = True
    arguments = dict(queue.get("arguments") or {})
    kind = queue.get("type")
    # The arguments as the application declared them, so that its own declaration matches the
    # new queue; a queue of another type than classic gets the x-queue-type that made it so.
    if isinstance(kind, str) and kind != "classic" and "x-queue-type" not in arguments:
        arguments["x-queue-type"] = kind
    if arguments:
        fields["arguments"] = {k: arguments[k] for k in sorted(arguments)}
    return {"queue.declare": fields}


def _why_skipped(queue: dict[str, JSON], name: str) -> tuple[str, str] | None:
    """Why a queue cannot be moved (a key of :attr:`Plan.skipped`, and the note), or None."""
    if queue.get("exclusive"):
        return "exclusive", ("it is exclusive (owned by one connection of the source: no other "
                             "connection can consume it, and it goes away with its owner)")
    if name.startswith(SERVER_NAMED_PREFIX):
        return "server-named", ("it is server-named (the broker picks a new amq.gen- name each "
                                "time the application declares it, so the application will not "
                                "look for this one on the destination)")
    return None


def plan_migration(queues: Sequence[dict[str, JSON]], *, source: str, destination: str,
                   include: Sequence[re.Pattern[str]] = (),
                   exclude: Sequence[re.Pattern[str]] = (),
                   shovels_per_process: int | None = None) -> Plan:
    """One shovel per queue, from ``source`` to the queue of the same name on ``destination``.

    :param queues: the source vhost's queues, as the management API lists them.
    :param source: the source URI, written into every shovel as given.
    :param destination: the destination URI, likewise.
    :param include: keep only queues whose whole name matches one of these (all when empty).
    :param exclude: then leave out those whose whole name matches one of these.
    :param shovels_per_process: written as given; None: chosen by
        :func:`shovels_per_process_for`.
    """
    plan = Plan(document={})
    shovels: dict[str, JSON] = {}
    taken: set[str] = set()
    for queue in sorted(queues, key=lambda q: str(q["name"])):
        name = str(queue["name"])
        if (include and not any(p.fullmatch(name) for p in include)) or \
                any(p.fullmatch(name) for p in exclude):
            plan.filtered += 1
            continue
        skipped = _why_skipped(queue, name)
        if skipped is not None:
            reason, note = skipped
            plan.skipped[reason] = plan.skipped.get(reason, 0) + 1
            plan.notes.append(f"skipped queue {name!r}: {note}")
            continue
        shovel: dict[str, JSON] = {
            "sources": {"broker": source},
            "destinations": {"broker": destination,
                             "declarations": [_destination_declaration(queue)]},
            "queue": name,
            "prefetch_count": DEFAULT_PREFETCH,
            "ack_mode": "on_confirm",
            "publish_fields": {"exchange": "", "routing_key": name},
        }
        if queue.get("type") == "stream":
            # A stream consumer must say where to start (the default is "next": only new
            # messages) and needs a prefetch, which the plan sets.
            shovel["consumer_args"] = {"x-stream-offset": "first"}
            plan.notes.append(f"queue {name!r} is a stream: its shovel reads it from the first "
                              "message and then follows it (a stream keeps what is read, so its "
                              "backlog does not fall, and a restarted shovel starts again from "
                              "the first message: duplicates on the destination); stop the "
                              "shovel once the destination holds every message")
        if queue.get("policy"):
            plan.notes.append(f"queue {name!r} has the policy {queue['policy']!r} on the source; "
                              "policies are not copied (only the queue's own arguments are): "
                              "define it on the destination vhost too")
        shovels[_shovel_name(name, taken)] = shovel
        plan.planned += 1
    per_process = shovels_per_process or shovels_per_process_for(plan.planned)
    if per_process is not None:
        plan.document["shovels_per_process"] = per_process
    plan.document["shovels"] = shovels
    return plan
