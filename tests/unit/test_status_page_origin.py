"""The status page's same-origin rule for a request that changes state: which Origin, Host and
bound address are one origin."""

from __future__ import annotations

import pytest
from pumpd.http.status_page import same_origin


@pytest.mark.parametrize(("origin", "host", "bound", "ok"), [
    ("http://127.0.0.1:15680", "127.0.0.1:15680", "127.0.0.1", True),
    ("http://localhost:15680", "localhost:15680", "127.0.0.1", True),
    ("http://[::1]:15680", "[::1]:15680", "::1", True),
    ("http://pumpd.lan:15680", "pumpd.lan:15680", "pumpd.lan", True),  # bound by that name
    ("http://pumpd.lan:15680", "pumpd.lan:15680", "0.0.0.0", False),  # could be rebound
    ("http://127.0.0.1:15681", "127.0.0.1:15680", "127.0.0.1", False),
    ("http://evil.example", "127.0.0.1:15680", "127.0.0.1", False),
    ("null", "127.0.0.1:15680", "127.0.0.1", False),  # sandboxed frame, file: page
    ("http://127.0.0.1:15680", None, "127.0.0.1", False),
])
def test_same_origin(origin: str, host: str | None, bound: str, ok: bool) -> None:
    assert same_origin(origin, host, bound) is ok

