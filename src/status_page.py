"""The status page served at ``GET /``: one self-contained HTML file shipped in the package
(inline CSS and JavaScript, no external resource: pumpd runs on machines without internet).

The page polls ``/api/overview`` and ``/api/shovels`` and posts restarts and deletes to the API
from the same origin; :func:`same_origin` is the check that lets those through while cross-site
requests stay refused.
"""

from __future__ import annotations

import functools
import ipaddress
from importlib import resources
from urllib.parse import urlsplit

CONTENT_TYPE = "text/html; charset=utf-8"

# The page needs its own inline script and style and same-origin fetches, nothing else: no other
# origin can be reached from it, and no other site may frame it (no clickjacking of its buttons).
HEADERS = (
    ("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; "
     "style-src 'unsafe-inline'; connect-src 'self'; img-src data:; base-uri 'none'; "
     "form-action 'none'; frame-ancestors 'none'"),
    ("X-Frame-Options", "DENY"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
)


@functools.cache
def html() -> str:
    """The page's text (read from the package once)."""
    return resources.files("pumpd").joinpath("status_page.html").read_text(encoding="utf-8")


def _literal_or_local(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def same_origin(origin: str, host_header: str | None, bound_host: str | None) -> bool:
    """Whether a browser request with this ``Origin`` comes from a page served by this endpoint.

    The origin's ``host:port`` must be the request's own ``Host``, so a page of another site is
    refused. That alone would let a DNS-rebinding page through (its name, resolved to this
    address, is then "same origin"), so the name must also be one no outside DNS can rebind: an
    IP literal, ``localhost``, or the host name the endpoint was bound to (``--http``).
    """
    if not host_header:
        return False
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or parts.netloc.lower() != host_header.lower():
        return False
    name = (parts.hostname or "").lower()
    return _literal_or_local(name) or (bound_host is not None and name == bound_host.lower())
