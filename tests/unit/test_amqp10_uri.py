"""AMQP 1.0 URIs (pumpd.config.amqp10_uri): amqp10_client:parse_uri/1's own cases
(deps/amqp10_client/src/amqp10_client.erl, parse_uri_test_) with the same verdict, where pumpd
reads them differently on purpose, the round trip, the TLS context, and that no password is ever
shown. Pure parsing: no broker."""

from __future__ import annotations

import pickle
import ssl
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pumpd.config.amqp10_uri import amqp10_uri_notes, parse_amqp10_uri, read_amqp10_uri
from pumpd.config.model import AMQP10_DEFAULT_MAX_FRAME_SIZE, Amqp10URI, SaslMechanism, TLSOptions
from pumpd.config.redaction import forget_secrets, redact
from pumpd.config.tls import ssl_context, tls_server_name
from pumpd.config.uri import URIError, format_uri

PLAIN, ANON, EXTERNAL = SaslMechanism.PLAIN, SaslMechanism.ANONYMOUS, SaslMechanism.EXTERNAL


@pytest.fixture(autouse=True)
def _forget_the_passwords() -> Iterator[None]:
    """The passwords these tests register (generated ones among them) stay out of the other
    tests' texts: the registry is the process's."""
    yield
    forget_secrets()

# amqp10_client's accepted cases: the URI and what its parse_uri/1 returns, in pumpd's fields.
CLIENT_ACCEPTS: list[tuple[str, dict[str, Any]]] = [
    ("amqp://my_host:9876", {"host": "my_host", "port": 9876, "sasl": ANON}),
    ("amqps://my_host", {"port": 5671}),
    ("amqp://my_host", {"port": 5672}),
    ("amqps://fred:passw@my_proxy:9876?sasl=plain&hostname=my_host&container_id=my_container"
     "&max_frame_size=512&idle_time_out=60000",
     {"host": "my_proxy", "port": 9876, "hostname": "my_host", "container_id": "my_container",
      "idle_time_out": 60000, "max_frame_size": 512, "sasl": PLAIN, "username": "fred",
      "password": "passw"}),
    ("amqp://fr%2Fed:pa%2Fssw@my_proxy:9876",
     {"host": "my_proxy", "sasl": PLAIN, "username": "fr/ed", "password": "pa/ssw"}),
    ("amqp://fred:passw@my_proxy:9876", {"sasl": PLAIN, "username": "fred", "password": "passw"}),
    ("amqps://fred:passw@my_proxy:9876?sasl=plain&cacertfile=/etc/cacertfile.pem"
     "&certfile=/etc/certfile.pem&keyfile=/etc/keyfile.key&verify=verify_none"
     "&fail_if_no_peer_cert=true&server_name_indication=frazzle&versions=tlsv1.1,tlsv1.2",
     {"tls": TLSOptions(cacertfile="/etc/cacertfile.pem", certfile="/etc/certfile.pem",
                        keyfile="/etc/keyfile.key", verify=False, fail_if_no_peer_cert=True,
                        server_name_indication="frazzle", versions=("tlsv1.1", "tlsv1.2"))}),
    ("amqps://fred:passw@my_proxy:9876?sasl=plain&server_name_indication=disable",
     {"tls": TLSOptions(server_name_indication="disable")}),
    ("amqps://my_host?sasl=external&cacertfile=/etc/cacert.pem&certfile=/etc/client.crt"
     "&keyfile=/etc/client.key",
     {"port": 5671, "sasl": EXTERNAL, "tls": TLSOptions(
         cacertfile="/etc/cacert.pem", certfile="/etc/client.crt", keyfile="/etc/client.key")}),
    ("amqp://my_proxy:9876?sasl=external", {"sasl": EXTERNAL}),
    ("amqps://my_host?cacertfile=/etc/cacert.pem&verify=verify_peer&customize_hostname_check=https",
     {"tls": TLSOptions(cacertfile="/etc/cacert.pem", customize_hostname_check="https")}),
]

# amqp10_client's refused cases, and the part of pumpd's reason that matches its error.
CLIENT_REFUSES = [
    ("amqps://fred:passw@my_proxy:9876?sasl=plain&versions=tlsv1.1,tlsv1.9999999",
     "'versions' takes a comma-separated list"),  # non_existent_atom
    ("amqps://fred:passw@my_proxy:9876?sasl=plain&cacertfile=/etc/cacertfile.pem"
     "&certfile=/etc/certfile.pem&keyfile=/etc/keyfile.key&verify=verify_bananas",
     "'verify' must be verify_peer or verify_none"),  # {invalid_option, verify}
    ("amqps://fred:passw@my_proxy:9876?sasl=plain&cacertfile=/etc/cacertfile.pem"
     "&certfile=/etc/certfile.pem&keyfile=/etc/keyfile.key&fail_if_no_peer_cert=banana",
     "'fail_if_no_peer_cert' must be true or false"),
    ("amqp://my_host:9876?sasl=plain", "plain_sasl_missing_userinfo"),
    ("amqp://my_host/my_path_segment:9876", "path_segment_not_supported"),
    ("amqps://my_host?customize_hostname_check=bogus",
     "'customize_hostname_check' must be https"),
]


@pytest.mark.parametrize("text, expected", CLIENT_ACCEPTS, ids=[c[0] for c in CLIENT_ACCEPTS])
def test_the_clients_accepted_uris(text: str, expected: dict[str, Any]) -> None:
    uri = parse_amqp10_uri(text)
    for name, value in expected.items():
        assert getattr(uri, name) == value, name
    if "hostname" not in expected:  # the host, as the client sends it
        assert uri.hostname is None and uri.effective_hostname == uri.host


@pytest.mark.parametrize("text, fragment", CLIENT_REFUSES, ids=[c[0] for c in CLIENT_REFUSES])
def test_the_clients_refused_uris(text: str, fragment: str) -> None:
    with pytest.raises(URIError, match=r"invalid AMQP 1\.0 URI") as info:
        parse_amqp10_uri(text)
    assert fragment in str(info.value)


def test_the_defaults() -> None:
    uri = parse_amqp10_uri("amqp://h")
    assert uri == Amqp10URI("amqp", "h", 5672)
    assert (uri.sasl, uri.username, uri.password, uri.idle_time_out, uri.max_frame_size,
            uri.container_id, uri.tls) == (ANON, "", "", 0, AMQP10_DEFAULT_MAX_FRAME_SIZE,
                                           None, None)
    assert parse_amqp10_uri("amqp://h/") == uri  # the path "/" is allowed
    assert parse_amqp10_uri("AMQP://h") == uri  # a scheme is case-insensitive (RFC 3986)
    assert parse_amqp10_uri("amqp://h?hostname=h") == uri  # the default, written out
    assert parse_amqp10_uri("amqp://[::1]:5673").host == "::1"


@pytest.mark.parametrize("text, fragment", [
    # where amqp10_client accepts the URI and fails at connect time, or reads it silently
    ("amqp://", "needs a host"),
    ("amqp:///%2F", "has no vhost path"),
    ("amqp://h/vhost", "has no vhost path"),
    ("amqp://user@h", "user:password, both non-empty"),
    ("amqp://user:@h", "user:password, both non-empty"),
    ("amqp://:secret@h", "user:password, both non-empty"),
    ("amqp://h?sasl=PLAIN", "'sasl' must be one of anon, plain, external"),
    ("amqp://h?sasl=anon&sasl=plain", "'sasl' is given twice"),
    ("amqp://h?heartbeat=5", "an AMQP 1.0 URI has idle_time_out (in milliseconds)"),
    ("amqp://h?frame_max=4096", "an AMQP 1.0 URI has max_frame_size"),
    ("amqp://h?auth_mechanism=plain", "sasl=plain, sasl=external or sasl=anon"),
    ("amqp://h?channel_max=1", "belongs to AMQP 0-9-1 URIs"),
    ("amqp://h?connection_timeout=5000", "belongs to AMQP 0-9-1 URIs"),
    ("amqp://h?colour=blue", "unknown query parameter 'colour' for an AMQP 1.0 URI"),
    ("amqp://h?cacertfile=/ca.pem", "is a TLS option: it needs the amqps scheme"),
    ("amqp://h?idle_time_out=-1", "must be a non-negative integer"),
    ("amqp://h?idle_time_out=4294967296", "must be from 0 to 4294967295"),
    ("amqp://h?max_frame_size=511", "must be from 512 to 4294967295"),
    ("amqp://h?hostname=", "'hostname' must not be empty"),
    ("amqp://h?container_id=", "'container_id' must not be empty"),
    ("amqp://h?hostname=" + "v" * 1025, "'hostname' must be at most 1024 bytes"),
    ("amqp://h?transfer_limit_margin=x", "'transfer_limit_margin' must be an integer"),
    ("amqps://h?versions=tlsv1.1,tlsv1.3", "without a gap"),
    ("amqps://h?versions=", "'versions' takes a comma-separated list"),
    ("amqps://h?keyfile=/k.pem", "'keyfile' needs 'certfile'"),
    ("amqp://h#frag", "fragment"),
    ("http://h", "unsupported scheme"),
    ("amqp://h:0", "the port must be a number from 1 to 65535"),
])
def test_pumpds_refusals(text: str, fragment: str) -> None:
    with pytest.raises(URIError) as info:
        parse_amqp10_uri(text)
    assert fragment in str(info.value)


def test_the_password_may_hold_a_colon() -> None:
    uri = parse_amqp10_uri("amqp://u:pa:ss@h")
    assert (uri.username, uri.password) == ("u", "pa:ss")


@pytest.mark.parametrize("text, sasl, note", [
    ("amqp://u:p@h?sasl=anon", ANON, "sasl=anon: the user information is not used"),
    ("amqps://u:p@h?sasl=external&certfile=/c.pem&keyfile=/k.pem", EXTERNAL,
     "sasl=external: the user information is not used"),
    ("amqp://h?sasl=external", EXTERNAL, "without a client certificate"),
    ("amqp://h?transfer_limit_margin=-5", ANON, "pumpd does not use it"),
    ("amqps://h?depth=3", ANON, "'depth' is not enforced"),
    ("amqps://h?certfile=/c.pem&keyfile=/k.pem&password=keysecret", ANON,
     "the plugin's AMQP 1.0 client ignores it"),
])
def test_what_pumpd_reads_otherwise_is_noted(text: str, sasl: SaslMechanism, note: str) -> None:
    uri, notes = read_amqp10_uri(text)
    assert uri.sasl is sasl
    assert any(note in n for n in notes), notes
    assert (uri.username, uri.password) == ("", "")  # only PLAIN keeps them


def test_no_note_for_a_plain_uri() -> None:
    assert read_amqp10_uri("amqps://u:p@h?cacertfile=/ca.pem")[1] == []
    assert amqp10_uri_notes(parse_amqp10_uri("amqp://h")) == []


@pytest.mark.parametrize("text", [c[0] for c in CLIENT_ACCEPTS] + [
    "amqp://h", "amqp://[::1]:5673?hostname=vhost:orders", "amqps://u:p%40ss@h?depth=2"
    "&password=k%26ey&certfile=/c&keyfile=/k&versions=tlsv1.3", "amqp://h?idle_time_out=0",
    "amqp://u:pa:ss@h.example:1?container_id=c%20d",
])
def test_the_uri_round_trips(text: str) -> None:
    uri = parse_amqp10_uri(text)
    assert parse_amqp10_uri(format_uri(uri)) == uri
    assert parse_amqp10_uri(uri.text_with_password()) == uri


def test_a_password_is_never_shown() -> None:
    text = "amqps://fred:hunter2secret@host:5671?hostname=vhost:v&certfile=/c&keyfile=/k" \
           "&password=keypassphrase"
    uri = parse_amqp10_uri(text)
    for shown in (uri.redacted(), repr(uri), str(uri), repr(uri.tls), redact(text)):
        assert "hunter2secret" not in shown and "keypassphrase" not in shown, shown
    assert uri.redacted() == "amqps://fred@host:5671?hostname=vhost:v"
    with pytest.raises(URIError) as info:
        parse_amqp10_uri("amqp://fred:otherpassword@h?heartbeat=5")
    assert "otherpassword" not in str(info.value)
    assert "fred:***@h" in str(info.value)
    with pytest.raises(URIError) as info:
        parse_amqp10_uri("amqp://fred:thirdpassword@h/vhost")
    assert "thirdpassword" not in str(info.value)
    # a passphrase under an encoded name is registered too
    with pytest.raises(URIError) as info:
        parse_amqp10_uri("amqps://h?certfile=/c&keyfile=/k&pass%77ord=fourthsecret&bad")
    assert "fourthsecret" not in str(info.value)
    assert "fourthsecret" not in redact("it was fourthsecret")


def test_unpickling_registers_the_password() -> None:
    uri = parse_amqp10_uri("amqp://fred:pickledsecret@h")
    data = pickle.dumps(uri)
    forget_secrets()
    assert "pickledsecret" in redact("a pickledsecret")
    again = pickle.loads(data)
    assert again == uri
    assert "pickledsecret" not in redact("a pickledsecret")


def test_the_tls_context_and_server_name() -> None:
    uri = parse_amqp10_uri("amqps://h?versions=tlsv1.2,tlsv1.3&verify=verify_none")
    ctx = ssl_context(uri)
    assert (ctx.minimum_version, ctx.maximum_version) == (ssl.TLSVersion.TLSv1_2,
                                                          ssl.TLSVersion.TLSv1_3)
    assert ctx.verify_mode == ssl.CERT_NONE and not ctx.check_hostname
    assert tls_server_name(uri) == "h"
    assert tls_server_name(parse_amqp10_uri("amqps://h?server_name_indication=other")) == "other"
    assert tls_server_name(parse_amqp10_uri("amqps://h?server_name_indication=disable")) is None
    default = ssl_context(parse_amqp10_uri("amqps://h"))
    assert default.verify_mode == ssl.CERT_REQUIRED and default.check_hostname


def test_an_unreadable_tls_file_is_a_uri_error(tmp_path: Any) -> None:
    uri = parse_amqp10_uri(f"amqps://u:filesecret@h?cacertfile={tmp_path}/missing.pem")
    with pytest.raises(URIError, match="cannot load the TLS files") as info:
        ssl_context(uri)
    assert "filesecret" not in str(info.value)


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30)
_HOSTS = st.from_regex(r"[a-z][a-z0-9-]{0,20}(\.[a-z][a-z0-9-]{0,10}){0,2}", fullmatch=True)


@given(user=_TEXT, password=_TEXT, host=_HOSTS, port=st.integers(1, 65535),
       hostname=st.none() | _TEXT.filter(lambda t: len(t.encode()) <= 255),
       idle=st.integers(0, 2**32 - 1), frame=st.integers(512, 2**32 - 1),
       container=st.none() | _TEXT, scheme=st.sampled_from(["amqp", "amqps"]))
def test_any_uri_round_trips_and_hides_its_password(user: str, password: str, host: str,
                                                    port: int, hostname: str | None, idle: int,
                                                    frame: int, container: str | None,
                                                    scheme: str) -> None:
    uri = Amqp10URI(scheme, host, port, PLAIN, user, password,
                    None if hostname == host else hostname, idle, frame, container)
    assert parse_amqp10_uri(uri.text_with_password()) == uri
    if len(password) >= 4 and password not in f"{user} {host} {hostname} {scheme}":
        assert password not in uri.redacted()
