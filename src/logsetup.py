"""Logging for the pumpd command: human-readable lines by default, JSON lines on request."""

from __future__ import annotations

import logging
import sys
import time

import orjson

from .config.uri import redact


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message (and the exception, if any)."""

    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        if record.exc_info:
            doc["exception"] = redact(self.formatException(record.exc_info))
        return orjson.dumps(doc).decode()


class RedactingFormatter(logging.Formatter):
    """The plain format, with any password in an AMQP URI removed."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def configure(fmt: str = "text", level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)-7s %(message)s", "%H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # pika logs every connection failure at ERROR with a traceback; pumpd reports them itself.
    logging.getLogger("pika").setLevel(logging.CRITICAL if level != "debug" else logging.DEBUG)
