"""What went wrong on a link, in words: :class:`LinkError`, and pika's failures described.

pika wraps a failure in workflow exceptions and names it by its Python type; the operator needs
the broker's reply, or "refused", "reset", "certificate rejected", and the user and vhost of a
refused login (never the password). This module unwraps and describes them.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from typing import Any

import pika.exceptions

from ..config.model import BrokerURI
from ..config.uri import EMPTY_VHOST_NOTE

__all__ = ["LinkError", "closed_how", "describe", "quiet_pika_errors", "reply_code", "root_cause"]

log = logging.getLogger("pumpd.amqp_link")


class LinkError(Exception):
    """A connection or channel failed, was refused, or was closed by the broker.

    ``reply_code`` is the broker's AMQP reply code when the broker closed the channel or the
    connection (406 PRECONDITION_FAILED, 501 FRAME_ERROR, ...), else None; ``side`` says which
    of a session's connections it was, when known.
    """

    def __init__(self, message: str, *, reply_code: int | None = None,
                 side: str | None = None) -> None:
        super().__init__(message)
        self.reply_code = reply_code
        # "source" or "destination" once a session knows which of its connections failed
        self.side = side


def root_cause(exc: BaseException) -> BaseException:
    """pika wraps connect failures in workflow exceptions; the last attempt's inner exception is
    what the user needs to see (refused, certificate rejected, timed out...)."""
    for _ in range(5):
        inner = getattr(exc, "exceptions", None)
        if inner:
            exc = inner[-1]
            continue
        inner_one = getattr(exc, "exception", None)
        if isinstance(inner_one, BaseException):
            exc = inner_one
            continue
        if isinstance(exc, pika.exceptions.AMQPConnectionError) and exc.args and isinstance(
            exc.args[0], BaseException
        ):
            exc = exc.args[0]
            continue
        break
    return exc


def reply_code(exc: BaseException) -> int | None:
    exc = root_cause(exc)
    if isinstance(exc, (pika.exceptions.ConnectionClosedByBroker,
                        pika.exceptions.ChannelClosedByBroker)):
        return int(exc.reply_code)
    return None


def closed_how(exc: BaseException) -> str:
    """How a connection or channel ended, in words: by the broker (with its reply), reset,
    or lost, never a Python exception's repr."""
    root = root_cause(exc)
    if isinstance(root, (pika.exceptions.ConnectionClosedByBroker,
                         pika.exceptions.ChannelClosedByBroker)):
        return f"closed by the broker: {root.reply_code} {root.reply_text}"
    if isinstance(root, pika.exceptions.StreamLostError):
        inner = root.args[0] if root.args else ""
        text = str(inner)
        if "ConnectionResetError" in text or "reset" in text.lower():
            return "reset by the peer"
        if "EOF" in text or "eof" in text:
            return "closed by the peer (end of stream)"
        return "lost (the TCP connection ended)"
    if isinstance(root, ConnectionResetError):
        return "reset by the peer"
    if isinstance(root, pika.exceptions.ConnectionClosedByClient):
        return "closed by pumpd"
    if isinstance(root, LinkError):
        return f"closed: {root}"
    return f"closed: {describe(root)}"


def describe(exc: BaseException, uri: BrokerURI | None = None) -> str:
    exc = root_cause(exc)
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"TLS certificate rejected: {exc.verify_message or exc}"
    if isinstance(exc, ssl.SSLError):
        return f"TLS handshake failed: {exc.reason or exc}"
    if isinstance(exc, ConnectionResetError):
        return "connection reset by the peer (a load balancer or proxy with no broker behind it?)"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (is the broker running on that host and port?)"
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "timed out"
    if isinstance(exc, pika.exceptions.ConnectionClosedByBroker):
        return f"{exc.reply_code} {exc.reply_text}"
    if isinstance(exc, pika.exceptions.ChannelClosedByBroker):
        return f"{exc.reply_code} {exc.reply_text}"
    if isinstance(exc, (pika.exceptions.StreamLostError,
                        pika.exceptions.IncompatibleProtocolError)):
        text = str(exc)
        if "ConnectionResetError" in text:
            return ("connection reset by the peer before the AMQP handshake finished (a load "
                    "balancer or proxy with no broker behind it?)")
        if "EOF" in text:
            return ("connection closed by the peer before the AMQP handshake finished (not an "
                    "AMQP 0-9-1 broker, or a proxy with no broker behind it?)")
        if isinstance(exc, pika.exceptions.IncompatibleProtocolError):
            return "the peer does not speak AMQP 0-9-1"
        return "connection lost during the AMQP handshake"
    if isinstance(exc, pika.exceptions.ProbableAuthenticationError):
        if uri is None:
            return "authentication refused (wrong username or password?)"
        # The user and vhost are named (never the password), as the plugin's reason does.
        return (f"authentication refused for user {uri.username!r} (vhost {uri.vhost!r}): wrong "
                "username or password?")
    if isinstance(exc, pika.exceptions.ProbableAccessDeniedError):
        if uri is None:
            return "access refused (does the user have access to the vhost?)"
        text = (f"access refused to vhost {uri.vhost!r} for user {uri.username!r} (does the vhost "
                "exist, and does the user have permissions on it?)")
        if uri.vhost == "":
            text += f"; {EMPTY_VHOST_NOTE}"
        return text
    text = str(exc) or type(exc).__name__
    return text


def quiet_pika_errors(loop: asyncio.AbstractEventLoop) -> None:
    """Keep pika's internal callback errors out of the ERROR log.

    After a failure pumpd already reports in one line (a reset during the handshake, a connection
    lost mid-stream), pika's own timers can still fire on the dead connection and raise
    (``ConnectionWrongStateError`` from ``AMQPConnector._on_overall_timeout``, an
    ``AssertionError`` in ``_on_stream_terminated``, the heartbeat checker writing to a closed
    transport). The event loop would log each with a traceback at ERROR; they are logged at
    DEBUG instead. Errors from anything but pika keep the loop's default handling.
    """

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        tb = getattr(exc, "__traceback__", None)
        from_pika = isinstance(exc, pika.exceptions.AMQPError)
        while tb is not None and not from_pika:
            from_pika = "/pika/" in tb.tb_frame.f_code.co_filename
            tb = tb.tb_next
        if from_pika:
            log.debug("pika, after a failure already reported: %s: %s",
                      context.get("message"), exc)
            return
        loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
