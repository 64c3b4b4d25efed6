"""The streams client's errors: a step that failed, and a peer that broke the protocol."""

from __future__ import annotations

__all__ = ["PeerViolation", "StreamsError"]


class StreamsError(Exception):
    """A streams protocol step failed or the connection ended: the text names the broker, the
    vhost and the step, and a code the broker answered by its name; never the password."""


class PeerViolation(StreamsError):
    """The peer broke the protocol (a frame larger than agreed, fields that do not fit their
    frame, an answer to no request, a confirm for a publisher never declared); the text says
    what it sent. The connection is closed."""
