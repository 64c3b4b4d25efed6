"""Secrets are never printed: the registry of known secrets, the structural rule, every
text form of a parsed URI, log lines, errors, the Spark options; and a property over generated
passwords. No broker, no process: tests/integration/test_redaction_outputs.py runs the commands
and daemons.
"""

from __future__ import annotations

import logging
import pickle
import sys
import unicodedata
import warnings
from collections.abc import Iterator
from urllib.parse import quote

import orjson
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from pumpd.config import redaction
from pumpd.config.parse import ConfigError, parse_config
from pumpd.config.redaction import MIN_SCRUB_LENGTH, redact, register_secret
from pumpd.config.uri import URIError, format_uri, parse_uri
from pumpd.logsetup import JsonFormatter, RedactingFormatter, RedactingStream
from pumpd.spark.redacted import redacted_error
from pumpd.spark.write.write_options import parse_options
from pumpd.supervisor.process_log import DaemonJsonFormatter

from tests.support.redaction_cases import CASE_IDS, CASES, Case, leaks


@pytest.fixture(autouse=True)
def empty_registry() -> Iterator[None]:
    """Each test starts knowing no secret: what it finds hidden, it registered itself."""
    redaction.forget_secrets()
    yield
    redaction.forget_secrets()


def _record(message: str, exc: BaseException | None = None, **extra: object) -> logging.LogRecord:
    rec = logging.LogRecord("pumpd.test", logging.ERROR, __file__, 1, "%s", (message,),
                            (type(exc), exc, None) if exc is not None else None)
    rec.__dict__.update(extra)
    return rec


def _log_lines(message: str, exc: BaseException | None = None) -> list[str]:
    """The line each of pumpd's log formats writes for ``message`` (and its exception)."""
    rec = _record(message, exc, reason=message)
    return [RedactingFormatter("%(message)s").format(rec), JsonFormatter().format(rec),
            DaemonJsonFormatter({"process": "coordinator"}).format(rec)]


def _text_forms(written: str) -> list[str]:
    """Every text a URI as written can become in pumpd: parsed or refused."""
    out = [redact(written), redact(f"connecting to {written} failed"),
           *_log_lines(f"connecting to {written}", RuntimeError(f"refused: {written}"))]
    try:
        uri = parse_uri(written)
    except URIError as exc:
        return [*out, str(exc), exc.uri, repr(exc)]
    return [*out, str(uri), repr(uri), uri.redacted(), repr(uri.tls), str(uri.tls),
            redact(format_uri(uri)), redact(uri.text_with_password()),
            redact(orjson.dumps({"uri": uri.text_with_password()}).decode())]


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_no_text_form_of_a_uri_shows_its_password(case: Case) -> None:
    written = case.uri()
    if case.parses:
        parse_uri(written)
    else:
        with pytest.raises(URIError):
            parse_uri(written)
    for text in _text_forms(written):
        assert leaks(text, case) == [], text


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_config_errors_quoting_a_uri_show_no_password(case: Case) -> None:
    def shovel(**clauses: object) -> dict[str, object]:
        return {"shovels": {"s": {"sources": {"broker": case.uri()},
                                  "destinations": {"broker": "amqp://h"}, "queue": "q",
                                  **clauses}}}

    bad_query = case.uri() + ("&" if "?" in case.uri() else "?") + "heartbeat=x"
    documents = [shovel(prefetch_count=-1),  # an error elsewhere, the URI parsed
                 shovel(ack_mode=case.uri()),  # the URI quoted as a bad value
                 {"shovels": {"s": {"sources": {"broker": bad_query},
                                    "destinations": {"broker": "amqp://h"}, "queue": "q"}}}]
    for doc in documents:
        with pytest.raises(ConfigError) as info:
            parse_config(doc)
        assert leaks(str(info.value), case) == [], str(info.value)


def test_the_value_rule_hides_every_form_anywhere_and_the_structure_any_length() -> None:
    parse_uri("amqp://ann:s%C3%A9cret%2Fx@h")
    assert redact("said s\u00e9cret/x, s%C3%A9cret%2Fx, s%c3%a9cret%2fx, s\\u00e9cret/x") == \
        "said ***, ***, ***, ***"
    parse_uri("amqp://bob:abc@h")  # 3 characters: not hidden outside a URI...
    assert redact("abc and amqp://bob:abc@h") == "abc and amqp://bob:***@h"  # ...but in one
    assert MIN_SCRUB_LENGTH == 4
    parse_uri("amqp://guest:guest@h")  # the public default: not a secret
    assert redact("user guest") == "user guest"


def test_the_userinfo_ends_at_the_last_at_and_a_key_password_at_the_next_parameter() -> None:
    assert redact("amqp://u:a@b/c@host/v") == "amqp://u:***@host/v"
    assert redact("amqp://h/vh@x") == "amqp://h/vh@x"  # no ':' before the '@': no password
    assert redact("amqps://h?certfile=/c&password=k&ey#x&verify=verify_none") == \
        "amqps://h?certfile=/c&password=***&verify=verify_none"


def test_the_parser_refuses_what_could_show_a_password_as_a_host_or_vhost() -> None:
    # RFC 3986 reads host "u", port 12, vhost "x@host": more likely the password "12/x".
    with pytest.raises(URIError, match="after host:port must be percent-encoded") as info:
        parse_uri("amqp://u:12/x@host")
    assert "12/x" not in str(info.value)
    assert parse_uri("amqp://h/vh@x").vhost == "vh@x"  # no ambiguity: as RabbitMQ reads it
    with pytest.raises(URIError, match="follows 'password'") as info:
        parse_uri("amqps://h?certfile=/c&keyfile=/k&password=ab&cdefgh")
    assert "cdefgh" not in str(info.value)


def test_an_unpickled_uri_registers_its_secrets_as_a_spawned_worker_needs() -> None:
    data = pickle.dumps(parse_uri("amqps://u:hunter22@h?certfile=/c&keyfile=/k&password=kp99"))
    redaction.forget_secrets()
    assert redact("hunter22 kp99") == "hunter22 kp99"
    pickle.loads(data)
    assert redact("hunter22 kp99") == "*** ***"


def test_a_redacting_stream_redacts_each_write() -> None:
    parse_uri("amqp://u:hunter22@h")
    written: list[str] = []

    class Sink:
        def write(self, text: str) -> int:
            written.append(text)
            return len(text)

    stream = RedactingStream(Sink())  # type: ignore[arg-type]
    print("pumpd: amqp://x:short@h hunter22", file=stream)  # type: ignore[arg-type]
    assert "".join(written) == "pumpd: amqp://x:***@h ***\n"


def test_many_secrets_stay_fast_and_bounded() -> None:
    register_secret(*(f"secret-{i:05d}" for i in range(2000)))
    text = ("a status line about shovel 42 and amqp://u@h:5672/%2F " * 20_000)
    assert redact(text + "secret-01999") == text + "***"
    register_secret(*(f"more-{i:06d}" for i in range(redaction.MAX_SECRETS)))
    assert redaction.known_secret_forms() == redaction.MAX_SECRETS
    assert redact("secret-01999 more-099999") == "secret-01999 ***"  # the oldest forgotten


# -- Spark ----------------------------------------------------------------------------------------


def test_write_options_repr_hides_the_uri_password_and_the_password_option() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        opts = parse_options({"uri": "amqp://bob:hunter22@h/v", "routingKey": "q"})
        parse_options({"uri": "amqp://bob:other-one@h/v"})
    assert [str(w.message) for w in caught] == [  # once per process
        "pumpd option uri: amqp://bob:***@h/v carries a password, which Spark may show in query "
        "plans, the UI and event logs (spark.redaction.regex does not match 'uri'): give it in "
        "the option 'password' instead"]
    assert "hunter22" not in repr(opts) and "hunter22" not in str(opts)
    opts = parse_options({"uri": "amqp://bob@h/v,amqp://bob@h2", "password": "p@ss w/rd"})
    assert "p@ss" not in repr(opts) and "password='***'" in repr(opts)
    assert opts.connect_uris() == ["amqp://bob:p%40ss%20w%2Frd@h/v",
                                   "amqp://bob:p%40ss%20w%2Frd@h2/%2F"]
    redaction.forget_secrets()
    pickle.loads(pickle.dumps(opts))  # as on an executor
    assert redact("p@ss w/rd") == "***"


def test_the_spark_loggers_redact_under_any_logging_setup(
        caplog: pytest.LogCaptureFixture) -> None:
    parse_uri("amqp://bob:hunter22@h")
    with caplog.at_level(logging.INFO, logger="pumpd.spark"):
        logging.getLogger("pumpd.spark").warning("task: %s", "amqp://x:pw@h hunter22")
    assert caplog.messages == ["task: amqp://x:***@h ***"]


def test_a_data_source_error_is_raised_again_redacted_with_its_causes() -> None:
    parse_uri("amqp://bob:hunter22@h")
    try:
        try:
            raise OSError("amqp://bob:hunter22@h: refused")
        except OSError as exc:
            raise ValueError("pumpd: hunter22 failed") from exc
    except ValueError as exc:
        again = redacted_error(exc)
    assert type(again) is ValueError and again.__cause__ is None
    assert str(again) == "pumpd: *** failed (caused by OSError: amqp://bob:***@h: refused)"

    class Odd(Exception):
        def __init__(self, a: int, b: int) -> None:
            super().__init__(f"{a} hunter22 {b}")

    again = redacted_error(Odd(1, 2))
    assert type(again) is RuntimeError and str(again) == "Odd: 1 *** 2"


# -- the property ---------------------------------------------------------------------------------

# Any printable text, the URI delimiters often.
PASSWORDS = st.text(
    st.one_of(st.sampled_from('@/:"%? #&=\\\'[]+'),
              st.characters(blacklist_categories=("Cs", "Cc"))),
    min_size=1, max_size=24)


def _lazy(text: str, also: str) -> str:
    """Percent-encoded as a user would: only what would break the URI (``%``, whitespace,
    controls and ``also``), the rest, unicode included, as is."""
    return "".join(quote(c, safe="") if c in "%" + also or c.isspace()
                   or unicodedata.category(c).startswith("C") else c for c in text)


def _fragments(text: str, baseline: str) -> set[str]:
    """Pieces of ``text`` of length MIN_SCRUB_LENGTH that the same output without the password
    (``baseline``) does not contain anyway (a password "amqp" is in every URI)."""
    n = MIN_SCRUB_LENGTH
    return {text[i:i + n] for i in range(len(text) - n + 1)} - \
        {baseline[i:i + n] for i in range(len(baseline) - n + 1)}


def _outputs(written: str) -> str:
    return "\n".join(_text_forms(written))


@given(password=PASSWORDS, encoding=st.sampled_from(["full", "lazy"]),
       where=st.sampled_from(["userinfo", "tls-key"]))
@example(password='pa"ss', encoding="lazy", where="userinfo")
@example(password="s/e@cret", encoding="lazy", where="userinfo")
@example(password="pa ss", encoding="lazy", where="userinfo")
@example(password="pa@ss", encoding="full", where="userinfo")
@example(password="Q", encoding="lazy", where="userinfo")
@example(password="k&ey#pass", encoding="lazy", where="tls-key")
def test_no_fragment_of_a_generated_password_survives(password: str, encoding: str,
                                                      where: str) -> None:
    redaction.forget_secrets()
    if where == "userinfo":
        enc = quote(password, safe="") if encoding == "full" else _lazy(password, "/?#")
        written = f"amqp://ann:{enc}@broker.example:5672/v?heartbeat=5"
        baseline_uri = "amqp://ann:Z@broker.example:5672/v?heartbeat=5"
    else:
        enc = quote(password, safe="") if encoding == "full" else _lazy(password, "&#")
        written = (f"amqps://ann@broker.example/v?certfile=/c.pem&keyfile=/k.pem"
                   f"&password={enc}&verify=verify_none")
        baseline_uri = ("amqps://ann@broker.example/v?certfile=/c.pem&keyfile=/k.pem"
                        "&password=Z&verify=verify_none")
    baseline = _outputs(baseline_uri)  # before the password is known: "verify_none" is there
    redaction.forget_secrets()
    out = _outputs(written)
    for secret in {password, enc}:
        survivors = {f for f in _fragments(secret, baseline) if f in out}
        assert not survivors, (survivors, out)
    # Whatever the length: the user information and the key's password show only as "***".
    assert all(line.count("ann:") == line.count("ann:***") for line in out.splitlines()), out
    assert out.count("password=") == out.count("password=***"), out


def test_hypothesis_profile_is_loaded() -> None:
    from hypothesis import settings

    assert settings().max_examples in (100, 300, 10_000)
    assert "tests.support.hypothesis_profiles" in sys.modules


@pytest.mark.parametrize("text", [
    "HTTP 302: redirected to http://127.0.0.1:43261; not followed",
    "connect to amqp://h:5672, then retry",
    "(see http://h:15672)",
])
def test_a_port_followed_by_punctuation_is_left_alone(text: str) -> None:
    assert redact(text) == text
