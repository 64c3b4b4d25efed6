"""What went wrong on a link, in words: :class:`LinkError`, and pika's failures described.

pika wraps a failure in workflow exceptions and names it by its Python type; the operator needs
the broker's reply, or "refused", "reset", "certificate rejected", and the user and vhost of a
refused login (never the password). This module unwraps and describes them.

The rule for a broker's refusal: its own ``reply_code`` and ``reply_text`` are quoted, always; a
hint may follow them only where it cannot mislead (a refused login, a vhost the user may not
enter), never in their place. pika replaces a ``connection.close`` received before
``connection.open-ok`` with a guess from the handshake's state (``ProbableAccessDeniedError``
for a connection limit, a channel limit or a missing vhost alike) and keeps the broker's close
only in that guess's text: :func:`broker_close` recovers it from there.
"""

from __future__ import annotations

import ast
import asyncio
import logging
import re
import socket
import ssl
from typing import Any

import pika.exceptions

from ..config.model import BrokerURI
from ..config.uri import EMPTY_VHOST_NOTE

__all__ = ["LinkError", "broker_close", "closed_how", "describe", "quiet_pika_errors", "reply_code",
           "root_cause"]

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


# pika's text for the close it replaced with a guess: repr(ConnectionClosedByBroker), i.e.
# "ConnectionClosedByBroker: (530) 'NOT_ALLOWED - ...'" (the reply text as a Python literal).
_REPLACED_CLOSE = re.compile(r"ConnectionClosedByBroker: \((\d{1,5})\) ('.*'|\".*\")", re.DOTALL)
_GUESSES = (pika.exceptions.ProbableAuthenticationError, pika.exceptions.ProbableAccessDeniedError,
            pika.exceptions.IncompatibleProtocolError)


def broker_close(exc: BaseException) -> tuple[int, str] | None:
    """The broker's own ``(reply_code, reply_text)`` when it closed the connection or the
    channel, also when pika replaced that close with a guess; None when the broker said
    nothing (a reset, a lost stream, a timeout)."""
    exc = root_cause(exc)
    if isinstance(exc, (pika.exceptions.ConnectionClosedByBroker,
                        pika.exceptions.ChannelClosedByBroker)):
        return int(exc.reply_code), str(exc.reply_text)
    if isinstance(exc, _GUESSES) and exc.args and isinstance(exc.args[0], str):
        found = _REPLACED_CLOSE.search(exc.args[0][:1024])  # a reply text is a short string
        if found is not None:
            try:
                text = ast.literal_eval(found.group(2))
            except (ValueError, SyntaxError):
                return None
            if isinstance(text, str):
                return int(found.group(1)), text
    return None


def reply_code(exc: BaseException) -> int | None:
    close = broker_close(exc)
    return close[0] if close is not None else None


# The broker's words for a vhost the user may not enter, and for one that does not exist: only
# then are the user and vhost named before them (and the empty vhost's note after them). A
# connection limit's text also begins "access to vhost ..." and gets neither: matched whole.
_VHOST_REFUSED = re.compile(r"NOT_ALLOWED - (access to vhost '.*' refused for user '.*'"
                            r"|vhost .* not found)", re.DOTALL)
# The broker's words for a refused login (RabbitMQ: "Login was refused using authentication
# mechanism PLAIN. For details see the broker logfile.").
_LOGIN_REFUSED = "Login was refused"


def _login_refused(said: str, uri: BrokerURI | None) -> str:
    if uri is None:
        return f"authentication refused: {said} (wrong username or password?)"
    # The user and vhost are named (never the password), as the plugin's reason does; first,
    # so that a status line cut to its length still says it.
    return (f"authentication refused for user {uri.username!r} (vhost {uri.vhost!r}): {said} "
            "(wrong username or password?)")


def _vhost_refused(said: str, uri: BrokerURI | None) -> str:
    if uri is None:
        return f"access refused: {said}"
    text = f"access refused to vhost {uri.vhost!r} for user {uri.username!r}: {said}"
    if uri.vhost == "":
        text += f"; {EMPTY_VHOST_NOTE}"
    return text


def quote_close(code: int, text: str, uri: BrokerURI | None = None) -> str:
    """The broker's close in its own words, ``530 NOT_ALLOWED - ...``; for a refused login or
    vhost, with the user and vhost named and a hint, which cannot mislead there."""
    said = f"{code} {text}"
    if code == 403 and _LOGIN_REFUSED in text:
        return _login_refused(said, uri)
    if code == 530 and _VHOST_REFUSED.fullmatch(text):
        return _vhost_refused(said, uri)
    return said


def closed_how(exc: BaseException) -> str:
    """How a connection or channel ended, in words: by the broker (with its reply), reset,
    or lost, never a Python exception's repr."""
    root = root_cause(exc)
    close = broker_close(root)
    if close is not None:
        return f"closed by the broker: {quote_close(*close)}"
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
    close = broker_close(exc)
    if close is not None:
        return quote_close(*close, uri)
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
    # The broker ended the connection during the handshake without a connection.close (an
    # old broker, or a proxy): pika's guess from the handshake's state is all there is, and is
    # said to be one.
    if isinstance(exc, pika.exceptions.ProbableAuthenticationError):
        return _login_refused("the connection ended during the login, no reason given", uri)
    if isinstance(exc, pika.exceptions.ProbableAccessDeniedError):
        return _vhost_refused("the connection ended at connection.open, no reason given (does "
                              "the vhost exist, and does the user have permissions on it?)", uri)
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
