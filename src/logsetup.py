"""Logging for the pumpd command: human-readable lines by default, JSON lines on request.

Every line goes through :func:`pumpd.config.redaction.redact` last (message, exception, and the
JSON format's extra fields): no password pumpd knows, and no URI's password, is ever written.
:class:`RedactingStream` does the same for what the command-line tools print.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, TextIO

import orjson

from .config.redaction import redact


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


def redact_fields(doc: dict[str, Any]) -> dict[str, Any]:
    """A log line's extra fields, their text redacted (a reason may quote a broker's words)."""
    return {k: redact(v) if isinstance(v, str) else v for k, v in doc.items()}


class RedactingStream:
    """A text stream that redacts what is written to it: ``sys.stderr`` (and ``sys.stdout`` where
    it carries no configuration) of the command-line tools. ``print`` writes a message in one
    call, so a secret is never split between two writes."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(redact(text))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding, ...
        return getattr(self.stream, name)


class RedactingFormatter(logging.Formatter):
    """The plain format, with any password in an AMQP URI removed."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def configure(fmt: str = "text", level: str = "info") -> None:
    """Log to stderr in ``fmt``; then stderr itself redacts what bypasses logging (a spawned
    process's dying traceback, printed by multiprocessing)."""
    stream = sys.stderr.stream if isinstance(sys.stderr, RedactingStream) else sys.stderr
    handler = logging.StreamHandler(stream)  # the formatters redact: no need to twice
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)-7s %(message)s", "%H:%M:%S"))
    sys.stderr = RedactingStream(stream)  # type: ignore[assignment]  # a TextIO's write
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # pika logs every connection failure at ERROR with a traceback; pumpd reports them itself.
    logging.getLogger("pika").setLevel(logging.CRITICAL if level != "debug" else logging.DEBUG)
