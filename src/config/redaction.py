"""Secrets out of text: the passwords pumpd knows, and the user information of any URI.

Two rules, applied together by :func:`redact` to everything that leaves the process (log lines,
error messages, HTTP bodies, ``pumpd check``, the importers' warnings, Spark errors):

1. **By value.** Every password and TLS key passphrase that a URI carries is registered here when
   the URI is parsed (and whenever a :class:`~pumpd.config.model.BrokerURI` is built or
   unpickled, so a spawned worker or a Spark executor knows them too). Each is registered in
   every form it may take in text: as written, percent-decoded, percent-encoded (upper and lower
   case hex, with and without ``/`` kept), and each of those as JSON and Python string literals
   escape it. A form of at least :data:`MIN_SCRUB_LENGTH` characters is replaced by ``***``
   wherever it appears, inside a URI or not. Shorter forms are not: replacing every ``a`` of a
   text would destroy it while hiding nothing (a 3-character secret has no secrecy to keep from
   someone who can read the rest). The public default password ``guest`` is not registered.
2. **By structure.** In any ``scheme://`` token, the password is hidden whatever its length: the
   user information ends at the *last* ``@`` of the token, and a ``password=`` query parameter's
   value runs to the next ``&name=``. A token ends at whitespace, or at a quote, an angle bracket
   or a backquote unless a password has begun before it (``user:`` or ``password=``) and an
   ``@`` follows: ``amqp://u:pa"ss@h`` is one URI, ``'amqp://u@h'`` stops at its quote. The parser
   refuses what would read a piece of a password as a host, vhost or query
   (:mod:`pumpd.config.uri`), so in a URI it accepts, the last ``@`` does end the user
   information.

The registry is process-wide and only grows (up to :data:`MAX_SECRETS`, the oldest forgotten
first): a secret that was once in a configuration stays hidden after a reload removed it.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from typing import Any
from urllib.parse import quote, unquote

__all__ = [
    "MAX_SECRETS",
    "MIN_SCRUB_LENGTH",
    "QUERY_PASSWORD",
    "RedactingFilter",
    "redact",
    "redact_uri",
    "register_one_uri_secrets",
    "register_secret",
    "register_uri_secrets",
    "split_userinfo",
    "uri_authority",
]

MIN_SCRUB_LENGTH = 4
MAX_SECRETS = 100_000  # spellings: some 10,000 passwords
# The default password of RabbitMQ's default user: public knowledge, and the same word as the
# default user's name, which would become "***" in every status line.
PUBLIC_PASSWORDS = frozenset({"guest"})
MASK = "***"

_lock = threading.Lock()
_forms: dict[str, None] = {}  # insertion-ordered set of every form of every secret
_pattern: re.Pattern[str] | None = None

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*)://")
_HOST_PORT = re.compile(r"(\[[^\]]*\]|[^:\[\]]*)(:\d*)?")
# A password= query parameter's value runs to the next "&name=": an unencoded "&" inside it
# must not leave the rest of the passphrase in sight.
QUERY_PASSWORD = re.compile(r"(?i)([?&;]password=)((?:[^&]|&(?![A-Za-z_]+=))*)")
_QUOTED_TAIL = re.compile(r'(?:[^"\\\n]|\\.)*')
_HEX_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")


def _forms_of(secret: str) -> set[str]:
    """The texts ``secret`` may appear as: encodings, then the escapes of string literals."""
    bases = {secret, quote(secret, safe=""), quote(secret)}
    try:
        bases.add(unquote(secret, errors="strict"))
    except UnicodeDecodeError:
        pass
    bases |= {_HEX_ESCAPE.sub(lambda m: m.group(0).lower(), b) for b in list(bases)}
    out: set[str] = set()
    for b in bases:
        out |= {b, json.dumps(b)[1:-1], json.dumps(b, ensure_ascii=False)[1:-1], repr(b)[1:-1]}
    return {f for f in out if len(f) >= MIN_SCRUB_LENGTH}


def register_secret(*texts: str | None) -> None:
    """Remember secrets (each in every form, see the module's rule 1) so :func:`redact` hides them.

    Takes the secret as written and as decoded alike; ``None``, short and public ones are ignored.
    """
    new: set[str] = set()
    for text in texts:
        if isinstance(text, str) and text not in PUBLIC_PASSWORDS:
            new |= _forms_of(text)
    global _pattern
    with _lock:
        fresh = [f for f in new if f not in _forms]
        if not fresh:
            return
        for f in fresh:
            _forms[f] = None
        while len(_forms) > MAX_SECRETS:
            del _forms[next(iter(_forms))]
        _pattern = None  # compiled when next needed: parsing 1,000 shovels compiles it once


def _compile(words: list[str]) -> re.Pattern[str]:
    """One regular expression matching any of ``words``, the longest at a position first.

    A trie, not a flat alternation: the regex engine then tries at each position only the
    branches that begin with the character there (17 times faster for 1,000 secrets over a
    megabyte of status JSON).
    """
    trie: dict[str, Any] = {}
    for w in words:
        node = trie
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}
    try:
        return re.compile(_trie_pattern(trie))
    except RecursionError:  # thousands of secrets each a prefix of the next: no trie, then
        return re.compile("|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)))


def _trie_pattern(node: dict[str, Any]) -> str:
    branches = []
    for ch, child in sorted(node.items()):
        if not ch:
            continue
        run = ch
        while len(child) == 1 and "" not in child:  # a chain: one literal, not nested groups
            (nxt, child), = child.items()
            run += nxt
        branches.append(re.escape(run) + _trie_pattern(child))
    if not branches:
        return ""
    body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
    return f"(?:{body})?" if "" in node else body


def register_uri_secrets(text: str) -> None:
    """Register the passwords of every URI in ``text`` (a whole file, say), without parsing it.

    For the importers, which may quote pieces of a file before any URI in it is parsed. A URI
    runs to the end of its quoted string (``\\"`` escapes a quote) or of the line, and, once
    more, to the first whitespace: registering a longer guess too costs nothing.
    """
    for m in _SCHEME.finditer(text):
        quoted = _QUOTED_TAIL.match(text, m.end())
        token = re.sub(r"\\(.)", r"\1", quoted.group(0) if quoted else "")
        for candidate in {token, token.split(None, 1)[0] if token.strip() else ""}:
            register_one_uri_secrets(candidate)


def register_one_uri_secrets(text: str) -> None:
    """Register the passwords of ``text``, a URI (or what follows its ``scheme://``) as written:
    the parser's first step, before anything can fail."""
    m = _SCHEME.match(text)
    userinfo, _, _ = split_userinfo(text[m.end():] if m else text)
    if userinfo is not None and ":" in userinfo:
        register_secret(userinfo.partition(":")[2])
    register_secret(*(q.group(2) for q in QUERY_PASSWORD.finditer(text)))


def known_secret_forms() -> int:
    """How many forms are registered (for tests and the curious)."""
    return len(_forms)


def forget_secrets() -> None:
    """Empty the registry: for tests that need to know exactly what is registered."""
    global _pattern
    with _lock:
        _forms.clear()
        _pattern = None


def _scrub_known(text: str) -> str:
    global _pattern
    pattern = _pattern
    if pattern is None:
        if not _forms:
            return text
        with _lock:
            if _pattern is None:
                _pattern = _compile(list(_forms))
            pattern = _pattern
    return pattern.sub(MASK, text)


def uri_authority(rest: str) -> str:
    """The authority (``user:password@host:port``) of what follows ``scheme://``: up to the
    first ``/``, ``?`` or ``#``, or all of it."""
    end = len(rest)
    for delim in "/?#":
        i = rest.find(delim)
        if 0 <= i < end:
            end = i
    return rest[:end]


def split_userinfo(rest: str) -> tuple[str | None, str, bool]:
    """Split what follows ``scheme://`` into (user information, the rest, suspicious).

    The user information normally ends at the last ``@`` of the authority (the part before the
    first ``/``, ``?`` or ``#``). When the authority has no ``@`` and does not look like
    ``host[:port]`` while an ``@`` follows later, the password most likely contains an unencoded
    ``/``, ``?`` or ``#``: then the user information is taken to end at the *last* ``@``, flagged
    as suspicious (the parser refuses it, the redactor hides all of it).
    """
    authority = uri_authority(rest)
    at = authority.rfind("@")
    if at >= 0:
        return rest[:at], rest[at + 1:], False
    if _HOST_PORT.fullmatch(authority) is None:
        at = rest.rfind("@")
        if at >= 0:
            return rest[:at], rest[at + 1:], True
    return None, rest, False


def _hide_in_uri(token: str) -> str:
    """One URI's text (what follows ``scheme://``) with its passwords hidden, by structure only."""
    # The key's password first: an "@" in it must not be taken for the end of a userinfo.
    token = QUERY_PASSWORD.sub(lambda m: m.group(1) + MASK, token)
    at = token.rfind("@")
    if at >= 0:
        user, sep, _ = token[:at].partition(":")
        head = f"{user}:{MASK}@" if sep else token[:at + 1]
        rest = token[at + 1:]
    else:
        # "amqp://user:secret" (host forgotten) would show the password as a "port".
        head, rest = "", token
        hostport = uri_authority(token)
        host, sep, port = hostport.partition(":")
        # A port may be followed by the sentence's punctuation ("http://h:8080; not followed").
        if (sep and port and not port.rstrip(";,.)]}").isdigit()
                and not hostport.startswith("[")):
            head, rest = f"{host}:{MASK}", token[len(hostport):]
    return head + rest


def redact_uri(text: str) -> str:
    """A text known to be one URI (e.g. the one a parse error is about), its secrets hidden.

    Unlike :func:`redact` it does not stop at whitespace or quotes: the whole text is the URI.
    """
    text = _scrub_known(text)
    m = _SCHEME.match(text)
    if m is None:
        return redact(text)
    return text[:m.end()] + _hide_in_uri(text[m.end():])


_QUOTES = "\"'<>`"
_PASSWORD_PARAM = re.compile(r"(?i)[?&;]password=")


def _token_end(text: str, start: int, stops: str) -> int:
    end = start
    while end < len(text) and not text[end].isspace() and text[end] not in stops:
        end += 1
    return end


def redact(text: str) -> str:
    """``text`` with every registered secret and every URI's password replaced by ``***``.

    Works on any ``scheme://`` URI (amqp, amqps, http, ...) and on malformed ones: the text to
    redact is often an error message about a URI that did not parse.
    """
    text = _scrub_known(text)
    out: list[str] = []
    pos = 0
    for m in _SCHEME.finditer(text):
        if m.start() < pos:
            continue
        start = m.end()
        end = _token_end(text, start, _QUOTES)
        token = text[start:end]
        if ":" in token.partition("@")[0] or _PASSWORD_PARAM.search(token):
            # A password begins ("user:" or "password="): a quote may be part of it, as in
            # "user:pa"ss@host" or "user:@'x@host", so the URI runs on to the last '@' before
            # whitespace. "'amqp://user@host'" does not get here (no ':' before its '@').
            longer = _token_end(text, start, "")
            if "@" in text[end:longer] or _PASSWORD_PARAM.search(token):
                end = longer
        out.append(text[pos:start] + _hide_in_uri(text[start:end]))
        pos = end
    out.append(text[pos:])
    return "".join(out)


class RedactingFilter(logging.Filter):
    """A logger filter that redacts a record's message (and drops its arguments, now in it): for
    the loggers of code that runs under someone else's logging setup (Spark's executors), where
    pumpd's formatters are not there to do it."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = redact(record.getMessage())
        record.args = None
        return True
