"""The daemon's HTTP endpoint, on asyncio streams (no web framework: pumpd adds no dependency).

Routes (every response is JSON via orjson, except /metrics and the page)::

    GET    /                               the status page (HTML; :mod:`pumpd.http.status_page`)
    GET    /api/overview                   pumpd itself: version, pid, uptime, configuration
    GET    /api/shovels                    every shovel (a list, like the management API)
    GET    /api/shovels/NAME               one shovel
    POST   /api/shovels/NAME/restart       restart its workers (drain, then start again)
    POST   /api/shovels/NAME/pause         pause it: its workers drain, the rest stays in the source
    POST   /api/shovels/NAME/resume        resume a paused shovel: its workers consume again
    PUT    /api/shovels/NAME               add or replace a run-time shovel (body: its definition)
    DELETE /api/shovels/NAME               remove a run-time shovel (its workers drain)
    GET    /api/group                      the group this daemon is a member of (404: none);
                                           /api/cluster is the same
    GET    /metrics                        Prometheus text format

NAME is percent-encoded in the path (``/`` as ``%2F``). One request per connection
(``Connection: close``): status readers are scripts, scrapers and a page polling every second.

Who may do what (the Host check, the bearer token, what is open) is :mod:`pumpd.http.access`.
On top of the token, a request that changes something is refused when it carries an ``Origin``
header of another site, which every browser sends with a cross-site POST/PUT/DELETE: the one
origin accepted is the status page's own (:func:`pumpd.http.status_page.same_origin`).

The server itself is bounded: at most ``MAX_CONNECTIONS`` open at once, counted from their
acceptance (the TLS handshake runs in the connection's own slot, within
``TLS_HANDSHAKE_TIMEOUT``), ``READ_TIMEOUT`` to send a whole request, ``WRITE_TIMEOUT`` to take
the answer, at most ``MAX_HEADERS`` header lines in ``MAX_HEAD`` bytes, and a ``Content-Length``
of digits only, stated once, up to ``MAX_BODY``. When every slot is taken, a new connection takes
the slot of the oldest one that has not sent a whole request
(:mod:`pumpd.http.connections` says which goes first): idle or slow clients without the
token cannot lock out one with it. A new connection is answered 503 and closed only when no
connection may be closed for it: every slot holds a request that presented the token, or one on
its way in.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import parse_qs, unquote

import orjson

from ..config.redaction import redact
from . import access as access_rules
from . import status_page
from .access import Access
from .connections import Connection, ConnectionTable, RequestReader, Stage

log = logging.getLogger("pumpd.http")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 15680
MAX_HEAD = 16 * 1024  # request line and headers
MAX_HEADERS = 64
MAX_BODY = 1024 * 1024
MAX_CONNECTIONS = 64
READ_TIMEOUT = 10.0  # for the whole request
WRITE_TIMEOUT = 10.0  # for the answer to be taken
TLS_HANDSHAKE_TIMEOUT = 10.0
LINGER_SECONDS, LINGER_BYTES = 1.0, 256 * 1024  # reading what follows a refused request
REASONS = {200: "OK", 201: "Created", 202: "Accepted", 204: "No Content", 400: "Bad Request",
           401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
           409: "Conflict", 411: "Length Required", 413: "Payload Too Large",
           421: "Misdirected Request", 431: "Request Header Fields Too Large",
           500: "Internal Server Error", 503: "Service Unavailable"}


def parse_address(text: str) -> tuple[str, int] | None:
    """``HOST:PORT``, ``:PORT``, ``[IPv6]:PORT`` or ``off`` (None) for ``--http``.

    :raises ValueError: on anything else.
    """
    if text.strip().lower() == "off":
        return None
    host, sep, port = text.strip().rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT or off, got {text!r}")
    host = host.strip("[]") or DEFAULT_HOST
    return host, int(port)


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any = None  # JSON-serialisable, or str for text/plain
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()


def error(status: int, message: str) -> Reply:
    return Reply(status, {"error": REASONS.get(status, "Error").lower(), "reason": message})


class Api(Protocol):
    """What the coordinator offers the HTTP endpoint. Called on the event loop; must not block."""

    def overview(self) -> dict[str, Any]: ...

    def shovel_list(self) -> list[dict[str, Any]]: ...

    def shovel(self, name: str) -> dict[str, Any] | None: ...

    def metrics(self) -> str: ...

    def cluster(self) -> dict[str, Any] | None: ...

    def restart(self, name: str) -> Reply: ...

    def pause(self, name: str, paused: bool) -> Reply: ...

    def put(self, name: str, body: bytes, force: bool = False) -> Reply: ...

    def delete(self, name: str, force: bool = False) -> Reply: ...


def _force(query: str) -> bool:
    """``?force=true`` (the plugin's ``delete_shovel --force``): act on a protected shovel."""
    values = parse_qs(query).get("force", [])
    return bool(values) and values[-1].lower() in ("true", "1", "yes")


def route(api: Api, method: str, path: str, body: bytes,
          endpoint_metrics: Callable[[], str] | None = None) -> Reply:
    """Dispatch one request. ``path`` is the raw (still percent-encoded) path;
    ``endpoint_metrics``: the endpoint's own series, after the daemon's on ``/metrics``."""
    path, _, query = path.partition("?")
    parts = path.strip("/").split("/")
    if path in ("/", "/index.html"):
        if method not in ("GET", "HEAD"):
            return error(405, "use GET")
        return Reply(200, status_page.html(), status_page.CONTENT_TYPE,
                     status_page.headers())
    if path == "/metrics":
        if method not in ("GET", "HEAD"):
            return error(405, "use GET")
        text = api.metrics() + (endpoint_metrics() if endpoint_metrics is not None else "")
        return Reply(200, text, "text/plain; version=0.0.4; charset=utf-8")
    if parts[:1] != ["api"]:
        return error(404, f"no such resource: {path}")
    if parts == ["api", "overview"]:
        return Reply(200, api.overview()) if method in ("GET", "HEAD") else error(405, "use GET")
    if parts in (["api", "group"], ["api", "cluster"]):
        if method not in ("GET", "HEAD"):
            return error(405, "use GET")
        doc = api.cluster()
        return Reply(200, doc) if doc is not None else error(
            404, "this daemon is in no group with a coordination broker (--group and the "
                 "\"group\" clause's coordination_uri)")
    if parts == ["api", "shovels"]:
        if method not in ("GET", "HEAD"):
            return error(405, "use GET (PUT and DELETE take a shovel name: /api/shovels/NAME)")
        return Reply(200, api.shovel_list())
    if len(parts) in (3, 4) and parts[1] == "shovels" and parts[2]:
        name = unquote(parts[2], errors="strict")
        if len(parts) == 4:
            if parts[3] not in ("restart", "pause", "resume"):
                return error(404, f"no such resource: {path}")
            if method != "POST":
                return error(405, "use POST")
            return api.restart(name) if parts[3] == "restart" else \
                api.pause(name, parts[3] == "pause")
        if method in ("GET", "HEAD"):
            doc = api.shovel(name)
            return Reply(200, doc) if doc is not None else error(404, f"no shovel {name!r}")
        if method == "PUT":
            return api.put(name, body, _force(query))
        if method == "DELETE":
            return api.delete(name, _force(query))
        return error(405, "use GET, PUT or DELETE")
    return error(404, f"no such resource: {path}")


def _encode(reply: Reply, head_only: bool) -> bytes:
    if reply.body is None or reply.status == 204:
        payload = b""
    elif isinstance(reply.body, str):
        payload = reply.body.encode("utf-8")
    else:
        # Redacted last, whatever built it: a refused PUT's reason quotes its input, a status its
        # broker's words.
        text = orjson.dumps(reply.body, option=orjson.OPT_INDENT_2).decode()
        payload = redact(text).encode() + b"\n"
    head = (f"HTTP/1.1 {reply.status} {REASONS.get(reply.status, 'Status')}\r\n"
            f"Content-Type: {reply.content_type}\r\n"
            f"Content-Length: {len(payload)}\r\n"
            "Cache-Control: no-store\r\n"
            + "".join(f"{name}: {value}\r\n" for name, value in reply.headers)
            + "Connection: close\r\n\r\n")
    return head.encode("latin-1") + (b"" if head_only else payload)


class BadRequest(Exception):
    """A request that is not answered beyond its status: ``status`` and a one-line reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def _parse_head(head: bytes) -> tuple[str, str, dict[str, str]]:
    """Request line and headers. A header given twice keeps its first value, except
    Content-Length and Host, whose repetitions must agree (request smuggling).

    :raises BadRequest: on a malformed line, too many headers, or disagreeing repeats.
    """
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[0].isalpha() or not parts[2].startswith("HTTP/1."):
        raise BadRequest(400, "malformed request line")
    header_lines = [line for line in lines[1:] if line]
    if len(header_lines) > MAX_HEADERS:
        raise BadRequest(431, f"at most {MAX_HEADERS} header lines are accepted")
    headers: dict[str, str] = {}
    for line in header_lines:
        key, colon, value = line.partition(":")
        if not colon or not key or key != key.strip() or " " in key:
            raise BadRequest(400, "malformed header line")
        key, value = key.lower(), value.strip()
        if key in headers:
            if key in ("content-length", "host") and headers[key] != value:
                raise BadRequest(400, f"conflicting {key} headers")
            continue
        headers[key] = value
    return parts[0].upper(), parts[1], headers


def content_length(headers: dict[str, str]) -> int:
    """The body's length: ``Content-Length`` as digits only (no sign, no ``_``, no spaces).

    :raises BadRequest: on anything else, a body over ``MAX_BODY``, or a chunked body.
    """
    if "transfer-encoding" in headers:
        raise BadRequest(411, "send a Content-Length (chunked bodies are not supported)")
    text = headers.get("content-length")
    if text is None:
        return 0
    if not text.isascii() or not text.isdigit() or len(text) > 12:
        raise BadRequest(400, "Content-Length must be a decimal number of bytes")
    length = int(text)
    if length > MAX_BODY:
        raise BadRequest(413, f"the body is limited to {MAX_BODY} bytes")
    return length


async def _read_head(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str]]:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise BadRequest(431, f"the request line and headers are limited to {MAX_HEAD} "
                              "bytes") from None
    return _parse_head(head)


async def _linger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """After an answer sent before the whole request was read: say we are done, then read
    (and drop) what the client still sends, briefly. Closing with unread bytes would reset the
    connection, and the client could lose the answer with it."""
    if writer.can_write_eof():
        writer.write_eof()
    loop = asyncio.get_running_loop()
    deadline, left = loop.time() + LINGER_SECONDS, LINGER_BYTES
    while left > 0 and not reader.at_eof():
        remaining = deadline - loop.time()
        if remaining <= 0:
            break
        chunk = await asyncio.wait_for(reader.read(min(left, 65536)), remaining)
        if not chunk:
            break
        left -= len(chunk)


class HttpServer:
    """Serves :class:`Api` on ``host:port`` until :meth:`close`, to those ``access`` lets in."""

    def __init__(self, api: Api, access: Access) -> None:
        self.api = api
        self.access = access
        self._server: asyncio.base_events.Server | None = None
        self._host: str | None = None  # as bound: a name the status page may be reached by
        self._port: int | None = None
        self._connections = ConnectionTable(MAX_CONNECTIONS)

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Bind and listen; returns the bound address.

        :raises OSError: when the address cannot be bound (e.g. in use).
        """
        loop = asyncio.get_running_loop()

        def connection() -> RequestProtocol:
            reader = RequestReader(limit=MAX_HEAD, loop=loop)
            return RequestProtocol(reader, self._handle, loop=loop)

        # asyncio.start_server's own factory, with a reader that notes an arrived head. No ssl=
        # here: each connection runs its TLS handshake in its own slot (``_handle``), so a
        # client that never finishes one is counted, bounded and evictable like any other.
        self._server = await loop.create_server(connection, host, port)
        self._host = host
        sockname = self._server.sockets[0].getsockname()
        self._port = int(sockname[1])
        return str(sockname[0]), int(sockname[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    def _admit(self, method: str, path: str, headers: dict[str, str]) -> Reply | None:
        """The refusal for a request that may not go further, or None."""
        access = self.access
        if not access_rules.host_allowed(headers.get("host"), self._host, self._port,
                                         access.allowed_hosts):
            return error(403, "the Host header does not name this endpoint: requests from other "
                              "web sites by DNS rebinding are refused (use its address, "
                              "localhost, or a name given with --http-allowed-host)")
        bare = path.partition("?")[0]
        if access_rules.needs_token(access, method, bare) and \
                not access_rules.bearer_matches(headers.get("authorization"), access.token):
            return Reply(401, {"error": "unauthorized",
                               "reason": "a valid bearer token is needed (pumpd's token file)"},
                         headers=(("WWW-Authenticate", 'Bearer realm="pumpd"'),))
        if method in ("POST", "PUT", "DELETE") and "origin" in headers and \
                not status_page.same_origin(headers["origin"], headers.get("host"), self._host):
            return error(403, "changes are not accepted from other web sites (Origin header)")
        return None

    def metrics(self) -> str:
        """The endpoint's own series for ``/metrics``."""
        return ("# HELP pumpd_http_connections_evicted_total HTTP connections closed to make room "
                "for new ones: idle, slow or not sending a whole request while every slot was "
                "taken.\n"
                "# TYPE pumpd_http_connections_evicted_total counter\n"
                f"pumpd_http_connections_evicted_total {self._connections.evicted}\n")

    async def _read(self, reader: asyncio.StreamReader,
                    conn: Connection) -> tuple[str, str, Reply | None, bytes]:
        """One request: method, path, the refusal it gets (or None) and its body, raising
        ``conn``'s stage to trusted once its head is admitted with the token."""
        method, path, headers = await _read_head(reader)
        conn.head_read = True
        length = content_length(headers)
        refusal = self._admit(method, path, headers)
        if refusal is None and access_rules.bearer_matches(headers.get("authorization"),
                                                           self.access.token):
            conn.stage = Stage.TRUSTED
        body = await reader.readexactly(length) if length else b""
        return method, path, refusal, body

    async def _answer(self, reader: asyncio.StreamReader, conn: Connection) -> tuple[str, Reply]:
        """Read one request within ``READ_TIMEOUT`` and answer it; ``conn`` is serving once a
        request that needs no token is whole."""
        try:
            method, path, refusal, body = await asyncio.wait_for(self._read(reader, conn),
                                                                 READ_TIMEOUT)
        except BadRequest as exc:
            return "", error(exc.status, str(exc))
        except (ValueError, UnicodeDecodeError):
            return "", error(400, "malformed HTTP request")
        if refusal is not None:
            return method, refusal
        conn.stage = max(conn.stage, Stage.SERVING)
        try:
            return method, route(self.api, method, path, body, self.metrics)
        except UnicodeDecodeError:
            return method, error(400, "the shovel name is not valid percent-encoded UTF-8")
        except Exception:
            log.exception("HTTP %s %s failed", method, path.partition("?")[0])
            return method, error(500, "internal error (see the pumpd log)")

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        conn = self._connections.admit(
            asyncio.current_task(), sock.fileno() if sock is not None else -1,
            reader if isinstance(reader, RequestReader) else None)
        tls = self.access.tls
        handshaken = tls is None
        answered = False
        try:
            if tls is not None:
                writer = await _start_tls(reader, writer, tls)
                handshaken = True
            if conn is None:
                method, reply = "", error(503, f"too many connections (at most "
                                               f"{MAX_CONNECTIONS}, each with a request being "
                                               "read or served)")
            else:
                method, reply = await self._answer(reader, conn)
            writer.write(_encode(reply, head_only=method == "HEAD"))
            answered = True
            await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT)
            if reply.status >= 400:
                if conn is not None:
                    conn.stage = Stage.WAITING  # answered: what follows is a courtesy
                await _linger(reader, writer)
        except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError, OSError):
            pass  # the client went away, or never finished its request: nothing to answer
        except asyncio.CancelledError:
            if conn is None or not conn.evicted:
                raise
        finally:
            if conn is not None:
                self._connections.release(conn)
            await _close(writer, handshaken, answered and not (conn is not None and conn.evicted))


class RequestProtocol(asyncio.StreamReaderProtocol):
    """asyncio's stream protocol, knowing when its connection went over to TLS: an end of file
    is then TLS's to handle (asyncio's own flag for it is set by ``StreamWriter.start_tls``
    only, Python 3.11 and later)."""

    over_tls = False

    def eof_received(self) -> bool:
        keep_open = super().eof_received()
        return bool(keep_open) and not self.over_tls


async def _start_tls(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     tls: ssl.SSLContext) -> asyncio.StreamWriter:
    """The TLS handshake of a connection already counted in the table; the writer of its TLS
    transport. Cancelled, it closes the socket itself.

    :raises OSError: when the handshake fails or takes over ``TLS_HANDSHAKE_TIMEOUT``.
    """
    loop = asyncio.get_running_loop()
    protocol = writer.transport.get_protocol()
    transport = await loop.start_tls(writer.transport, protocol, tls, server_side=True,
                                     ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT)
    if transport is None:  # the connection was lost as the handshake ended
        raise ConnectionResetError("the connection closed during its TLS handshake")
    if isinstance(protocol, RequestProtocol):
        protocol.over_tls = True
    return asyncio.StreamWriter(transport, protocol, reader, loop)


async def _close(writer: asyncio.StreamWriter, handshaken: bool, graceful: bool) -> None:
    """Close a connection: after an answer, letting it reach the client (within
    ``WRITE_TIMEOUT``); otherwise at once, nothing being owed."""
    if not handshaken:
        return  # a TLS handshake that failed, timed out or was cancelled closed its socket
    if not graceful:
        writer.transport.abort()
        return
    writer.close()
    try:
        await asyncio.wait_for(writer.wait_closed(), WRITE_TIMEOUT)
    except (ConnectionError, OSError, asyncio.TimeoutError):
        writer.transport.abort()
