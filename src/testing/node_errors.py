"""The errors of :mod:`pumpd.testing`'s private nodes (RabbitMQ and ActiveMQ)."""

from __future__ import annotations

__all__ = ["ActiveMQError", "LocalNodeError", "ManagementHTTPError"]


class LocalNodeError(RuntimeError):
    """A private node could not be started, stopped or controlled."""


class ManagementHTTPError(LocalNodeError):
    """The management HTTP API answered with an error status."""

    def __init__(self, method: str, url: str, status: int, body: str) -> None:
        super().__init__(f"{method} {url} -> HTTP {status}: {body[:2000]}")
        self.status = status
        self.body = body


class ActiveMQError(LocalNodeError):
    """A private ActiveMQ broker could not be started, stopped or reached."""
