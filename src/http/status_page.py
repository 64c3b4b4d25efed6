"""The status page served at ``GET /``: one self-contained HTML file shipped in the package
(inline CSS and JavaScript, no external resource: pumpd runs on machines without internet).

The page polls ``/api/overview`` and ``/api/shovels`` and posts restarts and deletes to the API
from the same origin, with the bearer token it asks the user for once and keeps in the tab's
``sessionStorage``; :func:`same_origin` is the check that lets those through while cross-site
requests stay refused.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import ipaddress
import re
from importlib import resources
from urllib.parse import urlsplit

CONTENT_TYPE = "text/html; charset=utf-8"



@functools.cache
def html() -> str:
    """The page's text (read from the package once)."""
    return resources.files("pumpd.http").joinpath("status_page.html").read_text(encoding="utf-8")


def _hashes(tag: str) -> str:
    blocks = re.findall(rf"<{tag}>(.*?)</{tag}>", html(), re.S)
    return " ".join("'sha256-" + base64.b64encode(hashlib.sha256(b.encode()).digest()).decode()
                    + "'" for b in blocks)


@functools.cache
def headers() -> tuple[tuple[str, str], ...]:
    """Response headers for the page. It runs its own inline script and style (allowed by hash,
    so markup that slipped into a shovel's name or reason could not run as script) and fetches
    from its own origin, nothing else; and no other site may frame it (no clickjacking of its
    buttons)."""
    csp = (f"default-src 'none'; script-src {_hashes('script')}; style-src {_hashes('style')}; "
           "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
    return (("Content-Security-Policy", csp), ("X-Frame-Options", "DENY"),
            ("X-Content-Type-Options", "nosniff"), ("Referrer-Policy", "no-referrer"))


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
