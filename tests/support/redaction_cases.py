"""The password forms, as URIs a user writes, and a check that a text shows none of
them (tests/unit/test_redaction.py, tests/integration/test_redaction_outputs.py,
tests/integration/test_spark.py)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from urllib.parse import quote


@dataclass(frozen=True)
class Case:
    """One password form: ``uri(host, vhost)`` is the URI as written; ``secrets`` what must never
    show (each also percent-encoded and string-escaped); ``parses``: whether pumpd accepts it."""

    id: str
    user: str
    template: str  # {user}, {host}, {vhost}
    secrets: tuple[str, ...]
    parses: bool

    def uri(self, host: str = "broker.example", vhost: str = "v") -> str:
        return self.template.format(user=self.user, host=host, vhost=quote(vhost, safe=""))


CASES = [
    Case("quote", "uquote", 'amqp://{user}:pa"ss@{host}/{vhost}', ('pa"ss',), True),
    # RFC 3986 would read host "uslash", port "s": refused as ambiguous, all of it hidden.
    Case("slash-at", "uslash", "amqp://{user}:s/e@cret@{host}/{vhost}",
         ("s/e@cret", "e@cret", "cret"), False),
    Case("space", "uspace", "amqp://{user}:pa ss@{host}/{vhost}", ("pa ss",), False),
    Case("percent", "upercent", "amqp://{user}:pa%40ss@{host}/{vhost}", ("pa@ss", "pa%40ss"),
         True),
    Case("tls-key", "utls", "amqps://{user}@{host}/{vhost}?certfile=/nonexistent/c.pem"
         "&keyfile=/nonexistent/k.pem&password=key-pass-9", ("key-pass-9",), True),
    Case("unicode", "uunicode", "amqp://{user}:p\u00e4ssw\u00f6rd\u2713@{host}/{vhost}",
         ("p\u00e4ssw\u00f6rd\u2713",), True),
    Case("one-char", "uonechar", "amqp://{user}:Q@{host}/{vhost}", ("Q",), True),
]
CASE_IDS = [c.id for c in CASES]


def forms(secret: str) -> set[str]:
    """How ``secret`` may be spelled in a text: as is, percent-encoded, JSON- and repr-escaped."""
    out = set()
    for s in (secret, quote(secret, safe=""), quote(secret)):
        out |= {s, json.dumps(s)[1:-1], json.dumps(s, ensure_ascii=False)[1:-1], repr(s)[1:-1]}
    return out


def leaks(text: str, case: Case) -> list[str]:
    """What of ``case``'s secrets ``text`` shows: any form of 4 characters or more, and, whatever
    the length, a user name followed by anything but ``:***@``, or a ``password=`` by anything
    but ``***`` and the parameter's end."""
    found = [f for s in case.secrets for f in forms(s) if len(f) >= 4 and f in text]
    # Every case's URI has a host: its user information must read exactly "user:***@".
    found += [m.group(0) for m in re.finditer(rf"{case.user}:(?!\*\*\*@).{{0,12}}", text)]
    found += [m.group(0) for m in re.finditer(r"password=(?!\*\*\*(?:&|$|[\s\"'\\]))"
                                              r".{0,12}", text, re.M)]
    return found
