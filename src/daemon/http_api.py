"""The daemon's HTTP endpoint, on asyncio streams (no web framework: pumpd adds no dependency).

Routes (every response is JSON via orjson, except /metrics and the page)::

    GET    /                               the status page (HTML; :mod:`pumpd.daemon.status_page`)
    GET    /api/overview                   pumpd itself: version, pid, uptime, configuration
    GET    /api/shovels                    every shovel (a list, like the management API)
    GET    /api/shovels/NAME               one shovel
    POST   /api/shovels/NAME/restart       restart its workers (drain, then start again)
    PUT    /api/shovels/NAME               add or replace a run-time shovel (body: its definition)
    DELETE /api/shovels/NAME               remove a run-time shovel (its workers drain)
    GET    /metrics                        Prometheus text format

NAME is percent-encoded in the path (``/`` as ``%2F``). One request per connection
(``Connection: close``): status readers are scripts, scrapers and a page polling every second.

There is no authentication: the endpoint listens on 127.0.0.1 by default. A request that changes
something is refused when it carries an ``Origin`` header, which every browser sends with a
cross-site POST/PUT/DELETE and no command-line client does: a web page cannot drive the daemon.
The one exception is the status page itself: a browser sends its same-origin requests with the
endpoint's own address as ``Origin`` (:func:`pumpd.daemon.status_page.same_origin`).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import unquote

import orjson

from ..config.redaction import redact
from . import status_page

log = logging.getLogger("pumpd.http")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 15680
MAX_HEAD = 64 * 1024
MAX_BODY = 1024 * 1024
READ_TIMEOUT = 10.0
REASONS = {200: "OK", 201: "Created", 202: "Accepted", 204: "No Content", 400: "Bad Request",
           403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed", 409: "Conflict",
           411: "Length Required", 413: "Payload Too Large", 500: "Internal Server Error",
           503: "Service Unavailable"}


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

    def restart(self, name: str) -> Reply: ...

    def put(self, name: str, body: bytes) -> Reply: ...

    def delete(self, name: str) -> Reply: ...


def route(api: Api, method: str, path: str, body: bytes) -> Reply:
    """Dispatch one request. ``path`` is the raw (still percent-encoded) path."""
    path = path.split("?", 1)[0]
    parts = path.strip("/").split("/")
    if path in ("/", "/index.html"):
        if method not in ("GET", "HEAD"):
            return error(405, "use GET")
        return Reply(200, status_page.html(), status_page.CONTENT_TYPE,
                     status_page.headers())
    if path == "/metrics":
        if method not in ("GET", "HEAD"):
            return error(405, "use GET")
        return Reply(200, api.metrics(), "text/plain; version=0.0.4; charset=utf-8")
    if parts[:1] != ["api"]:
        return error(404, f"no such resource: {path}")
    if parts == ["api", "overview"]:
        return Reply(200, api.overview()) if method in ("GET", "HEAD") else error(405, "use GET")
    if parts == ["api", "shovels"]:
        if method not in ("GET", "HEAD"):
            return error(405, "use GET (PUT and DELETE take a shovel name: /api/shovels/NAME)")
        return Reply(200, api.shovel_list())
    if len(parts) in (3, 4) and parts[1] == "shovels" and parts[2]:
        name = unquote(parts[2], errors="strict")
        if len(parts) == 4:
            if parts[3] != "restart":
                return error(404, f"no such resource: {path}")
            return api.restart(name) if method == "POST" else error(405, "use POST")
        if method in ("GET", "HEAD"):
            doc = api.shovel(name)
            return Reply(200, doc) if doc is not None else error(404, f"no shovel {name!r}")
        if method == "PUT":
            return api.put(name, body)
        if method == "DELETE":
            return api.delete(name)
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


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str], bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _version = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            key, _, value = line.partition(":")
            headers[key.strip().lower()] = value.strip()
    body = b""
    if "content-length" in headers:
        length = int(headers["content-length"])
        if length > MAX_BODY:
            raise _TooLarge()
        body = await reader.readexactly(length)
    elif headers.get("transfer-encoding"):
        raise _NoLength()
    return method.upper(), path, headers, body


class _TooLarge(Exception):
    pass


class _NoLength(Exception):
    pass


class HttpServer:
    """Serves :class:`Api` on ``host:port`` until :meth:`close`."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self._server: asyncio.base_events.Server | None = None
        self._host: str | None = None  # as bound: a name the status page may be reached by

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Bind and listen; returns the bound address.

        :raises OSError: when the address cannot be bound (e.g. in use).
        """
        self._server = await asyncio.start_server(self._handle, host, port, limit=MAX_HEAD)
        self._host = host
        sockname = self._server.sockets[0].getsockname()
        return str(sockname[0]), int(sockname[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        method = ""
        try:
            try:
                method, path, headers, body = await asyncio.wait_for(_read_request(reader),
                                                                     READ_TIMEOUT)
            except _TooLarge:
                reply = error(413, f"the body is limited to {MAX_BODY} bytes")
            except _NoLength:
                reply = error(411, "send a Content-Length (chunked bodies are not supported)")
            except (ValueError, asyncio.LimitOverrunError, UnicodeDecodeError):
                reply = error(400, "malformed HTTP request")
            else:
                if method in ("POST", "PUT", "DELETE") and "origin" in headers and \
                        not status_page.same_origin(headers["origin"], headers.get("host"),
                                                    self._host):
                    reply = error(403, "changes are not accepted from other web sites "
                                       "(Origin header)")
                else:
                    try:
                        reply = route(self.api, method, path, body)
                    except UnicodeDecodeError:
                        reply = error(400, "the shovel name is not valid percent-encoded UTF-8")
                    except Exception:
                        log.exception("HTTP %s %s failed", method, path)
                        reply = error(500, "internal error (see the pumpd log)")
            writer.write(_encode(reply, head_only=method == "HEAD"))
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError):
            pass  # the client went away or never finished its request: nothing to answer
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except (ConnectionError, OSError):
                pass
