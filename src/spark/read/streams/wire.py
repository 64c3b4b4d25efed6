"""A small blocking client of RabbitMQ's streams protocol (port 5552, or 5551 over TLS): what a
read task and the driver need, and nothing else.

Why not rstream for this: a read task is a plain generator on one thread, and rstream is asyncio
with a per-message callback; its frame decoding, its per-message context objects and its
``close()`` (which sleeps 0.2 s per connection, twice per consumer) took more of a task's time
than the reading. And rstream 1.1.1 could not read RabbitMQ 3.10's answer to ``partitions``
(a super stream's streams). Here a frame is read with two ``read`` calls on a buffered socket,
a ``Deliver`` frame's chunk is handed whole to the caller, and the requests are the protocol's
own (``PROTOCOL.adoc`` of rabbitmq-server's ``rabbitmq_stream`` plugin): peer properties, SASL
PLAIN, tune, open, ``subscribe`` at an offset with credit, ``credit``, ``partitions``, ``close``.
(``partitions`` works with RabbitMQ 3.10, whose answer carries the request's key.)

Over TLS the caller brings the ``ssl.SSLContext`` (:func:`pumpd.config.tls.ssl_context`, the
one the AMQP 0-9-1 side uses); the handshake happens before the first frame, within the
connection's timeout.

The connection reads from the node it is given (every node with a replica of the stream serves
consumers); a stream with no replica there answers ``subscribe`` with an error, which is raised.
"""

from __future__ import annotations

import socket
import ssl
import struct
import zlib
from collections.abc import Iterator
from typing import Any, NamedTuple

from ....streams.codes import (
    CLOSE,
    CREDIT,
    DECLARE_PUBLISHER,
    DELETE_PUBLISHER,
    DELIVER,
    HEARTBEAT,
    METADATA_UPDATE,
    OK,
    OPEN,
    PARTITIONS,
    PEER_PROPERTIES,
    PUBLISH,
    PUBLISH_CONFIRM,
    PUBLISH_ERROR,
    QUERY_PUBLISHER_SEQUENCE,
    RESPONSE_BIT,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    SUBSCRIBE,
    TUNE,
    UNSUBSCRIBE,
    code_name,
    command_name,
    refusal,
)
from ....streams.wire import (
    DELIVER_DATA_AT,
    FIRST,
    LAST,
    NEXT,
    OFFSET,
    PUBLISH_OVERHEAD,
    PUBLISHED_OVERHEAD,
    TIMESTAMP,
    FrameReader,
    Malformed,
    chunk_head,
    offset_specification,
    string,
)

# subscribe's offset specifications, as the streams layer names them
__all__ = ["FIRST", "LAST", "NEXT", "OFFSET", "TIMESTAMP", "Chunk", "StreamsConnectError",
           "StreamsConnection", "StreamsError"]

_HEAD = struct.Struct(">IHH")  # size, key, version
# The largest frame read before the connection is open: the broker's answers until then are a
# few hundred bytes, and a peer that is not a streams broker (an AMQP 0-9-1 or HTTP port) reads as
# a size of hundreds of megabytes. Once open, a Deliver frame is a whole chunk, however large the
# publishers made it.
LOGIN_FRAME_MAX = 1 << 20
_RESPONSE_HEAD = 14  # a response's size, key, version, correlation id and code
_PUBLISH_HEAD = struct.Struct(">IHHBi")  # size, key, version, publisher id, message count
# each message's (publishing id, length) in a publish frame
ENTRY_OVERHEAD = PUBLISHED_OVERHEAD
DATA_AT = DELIVER_DATA_AT  # where a Deliver frame's chunk data begins (after 4 reserved)


class StreamsError(RuntimeError):
    """The broker answered a request with an error code, or with a frame this client cannot
    use. The message names the broker, the vhost, the user and the step, and the code by its
    name (:mod:`pumpd.streams.codes`); never the password. ``code`` is the broker's code, None
    for a frame this client cannot use."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class StreamsConnectError(ConnectionError):
    """No streams connection to ``host:port``: refused, timed out, or the TLS handshake failed.
    The message names the address and the cause, never the credentials."""


class Chunk(NamedTuple):
    """One delivered chunk: ``frame[data_at:]`` holds its ``entries`` entries (``records``
    messages, more than entries when producers batch), the first at offset ``first``."""

    first: int
    entries: int
    records: int
    timestamp: int  # milliseconds
    frame: bytes
    data_at: int


def _strings_at(b: bytes, p: int) -> tuple[list[str], int]:
    (count,) = struct.unpack_from(">i", b, p)
    p += 4
    out = []
    for _ in range(max(count, 0)):
        (n,) = struct.unpack_from(">h", b, p)
        out.append(b[p + 2:p + 2 + n].decode())
        p += 2 + max(n, 0)
    return out, p


def _open(host: str, port: int, timeout: float, tls: ssl.SSLContext | None,
          server_hostname: str | None) -> socket.socket:
    """A connected socket, TLS done when ``tls`` is given; every failure names ``host:port``."""
    where = f"{host}:{port}"
    try:
        sock = socket.create_connection((host, port), timeout)
    except OSError as exc:
        raise StreamsConnectError(f"streams protocol: cannot connect to {where}: "
                                  f"{_reason(exc)}") from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if tls is None:
        return sock
    try:
        return tls.wrap_socket(sock, server_hostname=server_hostname)
    except (ssl.SSLError, OSError) as exc:
        sock.close()
        raise StreamsConnectError(f"streams protocol: TLS handshake with {where} failed: "
                                  f"{_handshake_failure(exc)}") from None


def _handshake_failure(exc: BaseException) -> str:
    """What went wrong in a TLS handshake, in words a user can act on (ssl's own text for an
    alert is a reason code; for a certificate it is OpenSSL's verify message)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (f"the server's certificate was refused ({exc.verify_message}); check the URI's "
                "cacertfile, and the host name or server_name_indication")
    # a peer that ends the handshake without a word, or answers it with something that is not
    # TLS, is most likely a plain-text listener
    plain = (isinstance(exc, ssl.SSLEOFError | ssl.SSLZeroReturnError | ConnectionResetError
                        | BrokenPipeError | TimeoutError)
             or (isinstance(exc, ssl.SSLError) and exc.reason in ("WRONG_VERSION_NUMBER",
                                                                 "RECORD_LAYER_FAILURE")))
    what = _reason(exc)
    if plain:
        return (f"{what}: is it the plain-text streams port? The TLS one "
                "(stream.listeners.ssl) is 5551 by default, option streamPort")
    return what


# OpenSSL's reason codes a user is likeliest to meet, in words (others are shown as they are)
_SSL_REASONS = {
    "WRONG_VERSION_NUMBER": "the server's answer is not TLS",
    "RECORD_LAYER_FAILURE": "the server's answer is not TLS",
    "TLSV13_ALERT_CERTIFICATE_REQUIRED": "the server requires a client certificate (certfile "
                                         "and keyfile in the URI)",
    "SSLV3_ALERT_BAD_CERTIFICATE": "the server refused the client certificate",
    "SSLV3_ALERT_CERTIFICATE_UNKNOWN": "the server refused the client certificate",
    "TLSV1_ALERT_UNKNOWN_CA": "the server does not trust the client certificate's CA",
    "SSLV3_ALERT_HANDSHAKE_FAILURE": "the server refused the handshake (no TLS version or "
                                     "cipher in common, or a client certificate it wants)",
}


def _reason(exc: BaseException) -> str:
    """An OSError / SSLError in a phrase (str() of an SSLError is a tuple's repr)."""
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, ssl.SSLEOFError | ssl.SSLZeroReturnError | ConnectionResetError
                  | BrokenPipeError):
        return "the server closed the connection"
    if isinstance(exc, ssl.SSLError):
        reason = str(exc.reason or exc.strerror or type(exc).__name__)
        return _SSL_REASONS.get(reason, reason)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


# a server that hangs up on the first request, or answers it in TLS, is most likely a TLS port
_TLS_HINT = (": is it the streams TLS port? Read it with an amqps URI (or give streamPort the "
             "plain-text port, 5552 by default)")


class StreamsConnection:
    """One authenticated connection; a context manager (closing it is best effort).

    Every error names the broker (``host:port``), the vhost and the step it was at, in words;
    a code the broker answered is given by its name with what it means (the user is named where
    the code is about the user: authentication, permissions)."""

    def __init__(self, host: str, port: int, username: str, password: str, vhost: str,
                 name: str = "pumpd", timeout: float = 30.0,
                 tls: ssl.SSLContext | None = None, server_hostname: str | None = None,
                 heartbeat: int | None = None) -> None:
        """With ``tls``, the connection is TLS, verified against ``server_hostname`` when the
        context checks host names (None: no SNI, as the AMQP side does with SNI disabled).
        ``heartbeat``: the interval asked for in seconds, 0 for none (None: the broker's)."""
        self._heartbeat = heartbeat
        self.address = f"{host}:{port}"
        self.username = username
        self.vhost = vhost
        self.timeout = timeout
        self.step = "connect"  # what the connection is doing, in words, for its errors
        self.sock = _open(host, port, timeout, tls, server_hostname)
        self.file = self.sock.makefile("rb", buffering=1 << 20)
        self._corr = 0
        self._tls = tls is not None
        self._frame_max: int | None = LOGIN_FRAME_MAX
        self.tuned_frame_max = 0
        # what the broker says of itself at login (``product``, ``version``, ...)
        self.server_properties: dict[str, str] = {}
        try:
            self._login(username, password, vhost, name)
            self._frame_max = None
        except BaseException as exc:
            self.file.close()
            self.sock.close()
            if isinstance(exc, ssl.SSLError):  # TLS 1.3: the server's verdict on the client's
                # certificate comes after the client's handshake ended, with the first read
                raise StreamsConnectError(f"streams protocol: TLS handshake with {self.address} "
                                          f"failed: {_handshake_failure(exc)}") from None
            raise

    @property
    def where(self) -> str:
        """How every error of this connection begins: the broker and the vhost."""
        return f"streams protocol {self.address} (vhost {self.vhost!r})"

    def _login(self, username: str, password: str, vhost: str, name: str) -> None:
        props = [("connection_name", name), ("product", "pumpd")]
        frame = self._request(PEER_PROPERTIES, struct.pack(">i", len(props))
                              + b"".join(string(k) + string(v) for k, v in props),
                              "exchange peer properties")
        try:
            reader = FrameReader(frame, _RESPONSE_HEAD)
            self.server_properties = reader.pairs("peer properties") if reader.left else {}
        except Malformed as exc:
            raise StreamsError(f"{self.where}: the broker's peer properties are malformed: "
                               f"{exc}") from None
        self._request(SASL_HANDSHAKE, b"", "list the SASL mechanisms")
        secret = b"\0" + username.encode() + b"\0" + password.encode()
        self._request(SASL_AUTHENTICATE, string("PLAIN") + struct.pack(">i", len(secret))
                      + secret, f"log in as user {username!r} with SASL PLAIN")
        self.step = "agree on the frame size and heartbeat (TUNE)"
        frame = self._frame()  # the server's tune: agree to its frame size and heartbeat
        key = _HEAD.unpack_from(frame)[1]
        if key != TUNE:
            raise StreamsError(f"{self.where}: cannot {self.step}: the broker sent "
                               f"{command_name(key)} instead")
        tune = frame[8:16] if self._heartbeat is None else frame[8:12] + struct.pack(
            ">I", self._heartbeat)
        self._send(TUNE, tune, correlated=False)
        # the frame size agreed (0: no limit), which a publisher's frames stay within
        self.tuned_frame_max = struct.unpack_from(">I", frame, 8)[0]
        self._request(OPEN, string(vhost), f"open vhost {vhost!r}")

    def __enter__(self) -> StreamsConnection:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def _send(self, key: int, body: bytes, correlated: bool = True) -> int:
        if correlated:
            self._corr += 1
            body = struct.pack(">I", self._corr) + body
        self.sock.sendall(_HEAD.pack(4 + len(body), key, 1) + body)
        return self._corr

    def _frame(self) -> bytes:
        """The next frame whole (its size field included); heartbeats are answered here.

        :raises TimeoutError: nothing came within the socket's timeout (the step is named)
        """
        while True:
            size = self._read(4)
            if len(size) < 4:
                raise ConnectionError(f"{self.where}: the broker closed the connection (at: "
                                      f"{self.step})"
                                      + ("" if self._tls or self._corr > 1 else _TLS_HINT))
            if size[0] == 0x15 and size[1] == 0x03 and not self._tls:  # a TLS alert record
                raise StreamsConnectError(f"streams protocol: {self.address} answered with a "
                                          f"TLS alert{_TLS_HINT}")
            (length,) = struct.unpack(">I", size)
            if length < _HEAD.size - 4 or (self._frame_max is not None
                                           and length > self._frame_max):
                raise StreamsError(f"{self.where}: the peer's answer (to {self.step}) is not a "
                                   f"streams protocol frame (a frame of {length} bytes): is "
                                   "streamPort the broker's streams port?")
            frame = size + self._read(length)
            if len(frame) < 4 + length:
                raise ConnectionError(f"{self.where}: the broker closed the connection within "
                                      f"a frame (at: {self.step})")
            key = _HEAD.unpack_from(frame)[1]
            if key == HEARTBEAT:
                self._send(HEARTBEAT, b"", correlated=False)
                continue
            if key == CLOSE:
                raise ConnectionError(f"{self.where}: the broker closed the connection (at: "
                                      f"{self.step}): {_close_reason(frame)}")
            return frame

    def _read(self, n: int) -> bytes:
        """Up to ``n`` bytes (fewer at the end of the stream).

        :raises TimeoutError: nothing came within the socket's timeout (the step is named)
        """
        try:
            got: bytes = self.file.read(n)
        except TimeoutError:
            raise TimeoutError(f"{self.where}: no answer from the broker within "
                               f"{self.timeout:g} s (to {self.step})") from None
        return got

    def _request(self, key: int, body: bytes, step: str) -> bytes:
        """Send a request and return its response frame; an error code raises
        :class:`StreamsError` naming ``step`` (what the request was for, in words)."""
        self.step = step
        corr = self._send(key, body)
        while True:
            frame = self._frame()
            got = _HEAD.unpack_from(frame)[1]
            if got in (key | RESPONSE_BIT, key) and len(frame) < _RESPONSE_HEAD:
                raise StreamsError(f"{self.where}: the broker's answer (to {step}) is "
                                   f"{len(frame)} bytes, too short for a response")
            # RabbitMQ 3.10 answers partitions with the request's own key, high bit not set
            # (rstream 1.1.1 took that answer for a request and never returned)
            if got in (key | RESPONSE_BIT, key) and struct.unpack_from(">I", frame, 8)[0] == corr:
                code = struct.unpack_from(">H", frame, 12)[0]
                if code != OK:
                    raise StreamsError(f"{self.where}: {refusal(code, step, self.username)}",
                                       code)
                return frame

    def partitions(self, super_stream: str) -> list[str]:
        """The streams of a super stream, in the order of its bindings."""
        step = f"list the partitions of super stream {super_stream!r}"
        frame = self._request(PARTITIONS, string(super_stream), step)
        try:
            return _strings_at(frame, 14)[0]
        except (struct.error, UnicodeDecodeError):
            raise StreamsError(f"{self.where}: the broker's answer (to {step}) is not a list of "
                               "stream names") from None

    def subscribe(self, stream: str, kind: int, value: int = 0, credit: int = 10,
                  subscription: int = 0) -> None:
        """Subscribe to ``stream`` at an offset specification (``OFFSET`` / ``TIMESTAMP`` take
        ``value``) with ``credit`` chunks."""
        spec = offset_specification(kind, value)
        self._request(SUBSCRIBE, struct.pack(">B", subscription) + string(stream) + spec
                      + struct.pack(">Hi", credit, 0), f"read stream {stream!r}")

    def unsubscribe(self, subscription: int = 0) -> None:
        self._request(UNSUBSCRIBE, struct.pack(">B", subscription),
                      f"end subscription {subscription}")

    def credit(self, chunks: int, subscription: int = 0) -> None:
        self._send(CREDIT, struct.pack(">BH", subscription, chunks), correlated=False)

    def chunk(self) -> Chunk:
        """The next delivered chunk (its CRC checked); the socket's timeout applies."""
        while True:
            frame = self._frame()
            key = _HEAD.unpack_from(frame)[1]
            if key == DELIVER:
                break
            if key == CREDIT | RESPONSE_BIT:  # credit is answered only when it failed
                code, subscription = struct.unpack_from(">HB", frame, 8)
                raise StreamsError(f"{self.where}: "
                                   + refusal(code, f"give credit to subscription {subscription}",
                                             self.username))
        try:  # sizes and type checked as the engine's asyncio client checks them
            head = chunk_head(frame)
        except Malformed as exc:
            raise StreamsError(f"{self.where}: a Deliver frame (to {self.step}): {exc}") from None
        first, length = head.first, head.data_length
        if zlib.crc32(memoryview(frame)[DATA_AT:DATA_AT + length]) != head.crc:
            raise StreamsError(f"{self.where}: chunk at offset {first} (to {self.step}): "
                               "bad CRC")
        return Chunk(first, head.entries, head.records, head.timestamp, frame, DATA_AT)

    def chunks(self, credit_every: int) -> Iterator[Chunk]:
        """Delivered chunks, giving credit back ``credit_every`` chunks at a time."""
        owed = 0
        while True:
            c = self.chunk()
            owed += 1
            if owed >= credit_every:
                self.credit(owed)
                owed = 0
            yield c

    # -- publishing: a named producer (its reference) is what the broker deduplicates by

    def declare_publisher(self, stream: str, reference: str = "", publisher: int = 0) -> None:
        """Declare publisher ``publisher`` of ``stream`` on this connection; with a
        ``reference``, the broker drops its messages whose publishing id is not above the last
        one it stored for that reference."""
        as_named = f" as producer {reference!r}" if reference else ""
        self._request(DECLARE_PUBLISHER, struct.pack(">B", publisher) + string(reference)
                      + string(stream), f"write to stream {stream!r}{as_named}")

    def query_publisher_sequence(self, stream: str, reference: str) -> int:
        """The last publishing id the broker stored for producer ``reference`` of ``stream``
        (0 when it knows none)."""
        step = f"ask stream {stream!r} for the last publishing id of producer {reference!r}"
        frame = self._request(QUERY_PUBLISHER_SEQUENCE, string(reference) + string(stream),
                              step)
        if len(frame) < _RESPONSE_HEAD + 8:
            raise StreamsError(f"{self.where}: the broker's answer (to {step}) is "
                               f"{len(frame)} bytes, too short for a publishing id")
        sequence: int = struct.unpack_from(">Q", frame, _RESPONSE_HEAD)[0]
        return sequence

    def delete_publisher(self, publisher: int = 0) -> None:
        self._request(DELETE_PUBLISHER, struct.pack(">B", publisher),
                      f"end publisher {publisher}")

    def publish(self, entries: list[bytes], count: int, publisher: int = 0) -> None:
        """One PUBLISH frame of ``count`` messages: ``entries`` joined are each one's
        publishing id (8 bytes), length (4 bytes) and AMQP 1.0 message; the caller keeps the
        frame within :attr:`tuned_frame_max`."""
        size = sum(map(len, entries))
        self.sock.sendall(_PUBLISH_HEAD.pack(PUBLISH_OVERHEAD - 4 + size, PUBLISH, 1, publisher,
                                             count) + b"".join(entries))

    def outcomes(self, publisher: int = 0) -> tuple[int, list[tuple[int, int]]]:
        """Wait for the next confirm or error frame of ``publisher`` (another publisher's are
        passed over): as :meth:`next_outcome` without the publisher."""
        while True:
            got, confirmed, errors = self.next_outcome()
            if got == publisher:
                return confirmed, errors

    def next_outcome(self) -> tuple[int, int, list[tuple[int, int]]]:
        """Wait for the next confirm or error frame of any publisher of this connection: the
        publisher's id, the number of messages it confirms, and the (publishing id, code) of
        each message it refuses.

        :raises TimeoutError: nothing came within the socket's timeout
        :raises StreamsError: a frame whose counts its size does not hold, or the stream gone
        """
        while True:
            frame = self._frame()
            key = _HEAD.unpack_from(frame)[1]
            if key == METADATA_UPDATE:
                raise StreamsError(f"{self.where}: the broker says a stream written to was "
                                   "deleted or has no leader any more (METADATA_UPDATE)")
            if key not in (PUBLISH_CONFIRM, PUBLISH_ERROR) or len(frame) < 13:
                continue  # answers to nothing in flight: a late credit error, a heartbeat's
            got, count = struct.unpack_from(">Bi", frame, 8)
            width = 8 if key == PUBLISH_CONFIRM else 10
            if count < 0 or 13 + count * width > len(frame):
                raise StreamsError(f"{self.where}: a {command_name(key)} frame of {len(frame)} "
                                   f"bytes cannot hold the {count} publishing ids it counts")
            if key == PUBLISH_CONFIRM:
                return got, count, []
            return got, 0, [struct.unpack_from(">QH", frame, 13 + i * 10) for i in range(count)]

    def set_timeout(self, seconds: float) -> None:
        """How long each read waits from now on (the login waited the connection's own)."""
        self.timeout = seconds
        self.sock.settimeout(seconds)

    def close(self) -> None:
        try:
            self.sock.settimeout(1.0)
            self._send(CLOSE, struct.pack(">H", 1) + string("OK"))
        except OSError:
            pass
        finally:
            self.file.close()
            self.sock.close()


# the longest close reason quoted from the broker, in characters
CLOSE_REASON_MAX = 500


def _close_reason(frame: bytes) -> str:
    """A server's CLOSE frame in words: its code by name, and its reason, quoted."""
    code = struct.unpack_from(">H", frame, 12)[0] if len(frame) >= 14 else 0
    reason = frame[16:].decode(errors="replace")[:CLOSE_REASON_MAX]
    return f"{code_name(code)} ({reason!r})" if reason else code_name(code)
