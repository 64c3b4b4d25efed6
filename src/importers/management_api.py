"""The management API of a source broker, read over HTTP: a vhost's queues.

One request (``GET /api/queues/VHOST``), with the source URI's credentials in HTTP basic
authentication; only the standard library's urllib is used. The credentials go over https only,
unless the caller says plain http is fine; a redirect is followed only within the same scheme,
host and port (anything else would hand the password to another server); the answer is read up
to :data:`MAX_RESPONSE_BYTES`.
"""

from __future__ import annotations

import base64
import http.client
import urllib.error
import urllib.request
from typing import IO
from urllib.parse import quote, urlsplit

from ..config.json_input import JsonInputError, read_json
from ..config.model import BrokerURI
from ..config.tls import ssl_context
from ..config.uri import URIError
from .import_errors import JSON, ConfigImportError

__all__ = ["HTTP_TIMEOUT", "MANAGEMENT_PORTS", "MAX_RESPONSE_BYTES", "fetch_queues",
           "management_url"]

MANAGEMENT_PORTS = {"amqp": 15672, "amqps": 15671}
HTTP_TIMEOUT = 30.0
# The answer's size: 64 MiB is some 100,000 queues as the management API describes them.
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
MAX_ERROR_BODY_BYTES = 64 * 1024  # an error page: only its "reason" is wanted


def management_url(uri: BrokerURI, port: int | None = None) -> str:
    """The management API's base URL on the source URI's host: http on 15672, or https on 15671
    for amqps (the plugin's defaults), unless ``port`` says otherwise."""
    scheme = "https" if uri.scheme == "amqps" else "http"
    host = uri.effective_host
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port or MANAGEMENT_PORTS[uri.scheme]}"


def _reason(body: bytes) -> str:
    """The management API's own words for an error, ``{"error": ..., "reason": ...}``."""
    try:
        doc = read_json(body, max_bytes=MAX_ERROR_BODY_BYTES)
    except JsonInputError:
        return ""
    if isinstance(doc, dict):
        return ": ".join(str(doc[k]) for k in ("error", "reason") if doc.get(k))
    return ""


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """Follow a redirect only to the same scheme, host and port: the request carries the
    source's password, which another server (or plain http) must not see."""

    def redirect_request(self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str,
                         headers: http.client.HTTPMessage,
                         newurl: str) -> urllib.request.Request | None:
        try:
            old, new = urlsplit(req.full_url), urlsplit(newurl)
            same = (old.scheme, old.hostname, old.port) == (new.scheme, new.hostname, new.port)
        except ValueError:  # a malformed Location (a stray '[', a port that is not a number)
            raise _RedirectRefused(f"HTTP {code}: redirected to a malformed URL; not "
                                   "followed") from None
        if not same:
            raise _RedirectRefused(f"HTTP {code}: redirected to {new.scheme}://{new.netloc}"
                                   "; not followed: it would send the source's password there "
                                   "(give that address with --management-url if it is the "
                                   "management API)")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


class _RedirectRefused(Exception):
    pass


def _read_bounded(stream: IO[bytes], limit: int, url: str) -> bytes:
    """At most ``limit`` bytes of an answer.

    :raises ConfigImportError: when it is longer.
    """
    body = stream.read(limit + 1)
    if len(body) > limit:
        raise ConfigImportError(f"the answer is larger than {limit} bytes: not read further",
                                source=url)
    return body


def _check_plain_http(url: str, insecure_http: bool) -> None:
    """Basic authentication sends the password in the clear over http.

    :raises ConfigImportError: for an http URL, unless the user said it is fine.
    """
    if urlsplit(url).scheme != "https" and not insecure_http:
        raise ConfigImportError(
            "refusing to send the source's user and password over plain http: give the "
            "management API's https address with --management-url https://HOST:15671 (or "
            "--management-port for an amqps source), or accept plain http with "
            "--management-insecure-http", source=url)


def fetch_queues(base_url: str, uri: BrokerURI, timeout: float = HTTP_TIMEOUT, *,
                 insecure_http: bool = False) -> list[dict[str, JSON]]:
    """Every queue of ``uri``'s vhost, as ``GET /api/queues/VHOST`` lists them.

    :param base_url: the management API, e.g. ``https://host:15671`` (a path prefix is kept).
    :param uri: the source; its user and password authenticate, its vhost is listed.
    :param insecure_http: send them over plain http too.
    :raises ConfigImportError: naming the URL and what went wrong (nothing listening, the user
        refused, no such vhost, an answer that is not the API's JSON or is too large, plain http
        without ``insecure_http``, a redirect elsewhere).
    """
    url = f"{base_url.rstrip('/')}/api/queues/{quote(uri.vhost, safe='')}"
    body = _get(_request(url, uri, insecure_http), url, uri, timeout)
    try:
        queues = read_json(body, max_bytes=MAX_RESPONSE_BYTES)
    except JsonInputError as exc:
        raise ConfigImportError(f"the answer is not JSON pumpd reads ({exc}): is this the "
                                "management API?", source=url) from None
    if not isinstance(queues, list) or not all(
            isinstance(q, dict) and isinstance(q.get("name"), str)
            and isinstance(q.get("arguments") or {}, dict) for q in queues):
        raise ConfigImportError("the answer is not a list of queues: is this the management "
                                "API?", source=url)
    # Only the vhost asked for, whatever the URL answered (a proxy in front may rewrite paths).
    return [q for q in queues if q.get("vhost", uri.vhost) == uri.vhost]


def _request(url: str, uri: BrokerURI, insecure_http: bool) -> urllib.request.Request:
    """The GET of ``url``, with ``uri``'s user and password.

    :raises ConfigImportError: for a URL urllib cannot use, or plain http unless allowed.
    """
    try:
        _check_plain_http(url, insecure_http)
        request = urllib.request.Request(url, method="GET")
    except ValueError as exc:  # not a URL urllib can use
        raise ConfigImportError(f"not an http or https URL: {exc}", source=url) from None
    credentials = f"{uri.username}:{uri.password}".encode()
    request.add_header("Authorization", "Basic " + base64.b64encode(credentials).decode())
    request.add_header("Accept", "application/json")
    return request


def _get(request: urllib.request.Request, url: str, uri: BrokerURI, timeout: float) -> bytes:
    """The answer's body, at most :data:`MAX_RESPONSE_BYTES`.

    :raises ConfigImportError: saying what went wrong, in the user's terms.
    """
    try:
        context = ssl_context(uri) if url.startswith("https:") else None
    except URIError as exc:  # the URI's TLS files cannot be loaded
        raise ConfigImportError(str(exc), source=url) from None
    opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context),
                                         _SameOriginRedirects())
    try:
        with opener.open(request, timeout=timeout) as response:
            return _read_bounded(response, MAX_RESPONSE_BYTES, url)
    except _RedirectRefused as exc:
        raise ConfigImportError(str(exc), source=url) from None
    except ValueError as exc:  # urllib on a malformed URL of its own making or a server's
        raise ConfigImportError(f"cannot use this URL: {exc}", source=url) from None
    except urllib.error.HTTPError as exc:
        raise _refused(exc, url, uri) from None
    except (urllib.error.URLError, OSError) as exc:
        why = getattr(exc, "reason", exc)
        hint = ""
        if isinstance(why, ConnectionRefusedError):
            why = "connection refused"
            hint = ("; is the management plugin enabled on the source broker (rabbitmq-plugins "
                    "enable rabbitmq_management)? Otherwise give its port with "
                    "--management-port or its address with --management-url")
        raise ConfigImportError(f"cannot reach the management API: {why}{hint}",
                                source=url) from None
    except http.client.HTTPException as exc:  # something answered, but not in HTTP
        raise ConfigImportError(f"the answer is not HTTP ({type(exc).__name__}): is this the "
                                "management API's port?", source=url) from None


def _refused(exc: urllib.error.HTTPError, url: str, uri: BrokerURI) -> ConfigImportError:
    """An HTTP error status in words: what a 401 or a 404 most likely means."""
    said = _reason(exc.read(MAX_ERROR_BODY_BYTES))
    status = f"HTTP {exc.code}" + (f" ({said})" if said else f" {exc.reason}")
    if exc.code == 401:
        return ConfigImportError(
            f"{status}: the management API refused the user {uri.username!r}: check the "
            "user and password in the source URI; the user also needs a management tag "
            "(monitoring, management or administrator) and access to the vhost", source=url)
    if exc.code == 404:
        return ConfigImportError(
            f"{status}: the source has no vhost {uri.vhost!r} (the vhost is the source "
            "URI's path, '/' written as %2F), or this is not the management API", source=url)
    return ConfigImportError(f"{status}", source=url)
