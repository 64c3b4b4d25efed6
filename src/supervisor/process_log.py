"""Logging for the daemon's processes: :mod:`pumpd.logsetup`'s formats, told which process speaks.

The coordinator and every worker write to the same stderr. In the text format a worker's lines
carry ``[NAME#i pid N]`` (in a worker host, the hosted shovel that logs, or ``[host pid N]``); in
the JSON format every line carries ``process`` ("coordinator", "worker" or "worker-host"),
``pid``, and for a worker (or a hosted shovel) ``shovel`` and ``worker``. Supervision events add their
fields (``event``, ``shovel``, ``worker``, ``state``, ``reason``, ``restarts``, ``exit``, ...) through
``extra=``, so a log shipper can filter on them without parsing the message.
"""

from __future__ import annotations

import contextvars
import logging
import os
from typing import Any

import orjson

from .. import logsetup

# Keys that supervision log calls pass with ``extra=`` and the JSON format copies into the line.
EVENT_FIELDS = ("event", "shovel", "worker", "state", "reason", "restarts", "exit", "delay",
                "pid_old", "counters", "added", "changed", "removed", "unchanged", "to")


class DaemonJsonFormatter(logsetup.JsonFormatter):
    def __init__(self, identity: dict[str, Any]) -> None:
        super().__init__()
        self.identity = identity

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = orjson.loads(super().format(record))
        doc.update(self.identity)
        doc["pid"] = record.process
        extra: dict[str, Any] = {}
        for key in EVENT_FIELDS:
            value = record.__dict__.get(key)
            if value is not None:
                extra[key] = value
        doc.update(logsetup.redact_fields(extra))
        return orjson.dumps(doc).decode()


# In a worker process, the position whose task is logging: each hosted pump runs in a task created
# in a context of its own (see pumpd.supervisor.worker), so its lines carry its shovel and worker.
HOSTED: contextvars.ContextVar[tuple[str, int] | None] = contextvars.ContextVar(
    "pumpd_hosted", default=None)


def _hosted_fields(record: logging.LogRecord) -> bool:
    hosted = HOSTED.get()
    if hosted is None:
        record.hosted = "host"
    else:
        record.hosted = f"{hosted[0]}#{hosted[1]}"
        if getattr(record, "shovel", None) is None:
            record.shovel, record.worker = hosted
    return True


def configure(fmt: str, level: str, *, shovel: str | None = None,
              worker: int | None = None, host: bool = False) -> None:
    """Set up logging for the coordinator (no ``shovel``), for one worker process, or for a
    worker host (several shovels: their lines name the shovel in the message or the fields)."""
    logsetup.configure(fmt, level)
    handler = logging.getLogger().handlers[0]
    if host:
        identity: dict[str, Any] = {"process": "worker-host"}
        handler.addFilter(_hosted_fields)
        tag = f"[%(hosted)s pid {os.getpid()}] "
    elif shovel is None:
        identity = {"process": "coordinator"}
        tag = ""
    else:
        identity = {"process": "worker", "shovel": shovel, "worker": worker}
        # '%' doubled: the tag goes into a logging format string
        tag = f"[{shovel}#{worker} pid {os.getpid()}] ".replace("%", "%%")
    if fmt == "json":
        handler.setFormatter(DaemonJsonFormatter(identity))
    else:
        handler.setFormatter(logsetup.RedactingFormatter(
            f"%(asctime)s %(levelname)-7s {tag}%(message)s", "%H:%M:%S"))
