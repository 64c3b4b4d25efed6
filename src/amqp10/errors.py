"""What went wrong on an AMQP 1.0 connection, in words: :class:`Amqp10Error` names the step
(connect, sasl, open, begin, attach ADDRESS, ...), the peer, and, when the peer said why, the
error condition and description it sent. :class:`PeerViolation` is raised inside the client
when the peer breaks the protocol; the connection closes with its condition.

The condition names are those of the AMQP 1.0 specification (§2.8.15 to §2.8.18).
"""

from __future__ import annotations

__all__ = [
    "DECODE_ERROR",
    "FRAMING_ERROR",
    "MESSAGE_SIZE_EXCEEDED",
    "NOT_ALLOWED",
    "RESOURCE_LIMIT_EXCEEDED",
    "UNATTACHED_HANDLE",
    "WINDOW_VIOLATION",
    "Amqp10Error",
    "NoCredit",
    "PeerViolation",
]

FRAMING_ERROR = "amqp:connection:framing-error"
DECODE_ERROR = "amqp:decode-error"
NOT_ALLOWED = "amqp:not-allowed"
RESOURCE_LIMIT_EXCEEDED = "amqp:resource-limit-exceeded"
WINDOW_VIOLATION = "amqp:session:window-violation"
UNATTACHED_HANDLE = "amqp:session:unattached-handle"
MESSAGE_SIZE_EXCEEDED = "amqp:link:message-size-exceeded"


class Amqp10Error(Exception):
    """A step of an AMQP 1.0 connection failed, was refused, or the connection ended.

    ``step`` is what the client was doing ("connect", "tls", "sasl", "open", "begin",
    "attach /queue/q", "transfer /queue/q", "connection" once established, "close");
    ``condition`` and ``description`` are the AMQP error the peer sent (or the client sent, when
    it closed the connection on the peer's fault), None when there was none; ``peer`` is
    host:port. ``str()`` is one line that says all of it.
    """

    def __init__(self, step: str, what: str, *, condition: str | None = None,
                 description: str | None = None, peer: str = "") -> None:
        self.step = step
        self.what = what
        self.condition = condition
        self.description = description
        self.peer = peer
        super().__init__(self._text())

    def _text(self) -> str:
        where = f"AMQP 1.0 {self.peer}" if self.peer else "AMQP 1.0"
        text = f"{where}: {self.step}: {self.what}"
        if self.condition is not None:
            text += f": {self.condition}"
            if self.description:
                text += f" ({self.description})"
        elif self.description:
            text += f": {self.description}"
        return text

    def at(self, step: str) -> Amqp10Error:
        """The same failure, seen from ``step`` (a wait that the failure ended)."""
        if step == self.step:
            return self
        return Amqp10Error(step, self.what, condition=self.condition,
                           description=self.description, peer=self.peer)


class PeerViolation(Exception):
    """The peer broke the protocol: the connection is closed with ``condition`` and
    ``description`` (also ``str()``)."""

    def __init__(self, condition: str, description: str) -> None:
        super().__init__(description)
        self.condition = condition
        self.description = description


class NoCredit(RuntimeError):
    """:meth:`~pumpd.amqp10.link.Sender.send` was called while the sender's ``credit`` was 0:
    the caller checks ``credit`` first and waits for ``on_credit``."""
