"""AMQP URI parsing, redaction and pika parameters: pure parsing, no broker."""

from __future__ import annotations

import ssl
from pathlib import Path

import pika
import pika.credentials
import pytest
from pumpd.config.model import BrokerURI, TLSOptions
from pumpd.config.uri import FRAME_MAX_SIZE, FRAME_MIN_SIZE, URIError, format_uri, parse_uri, redact
from pumpd.engine.parameters import to_pika_parameters

# The URI spec's own table (https://www.rabbitmq.com/uri-spec.html, appendix A), plus the plugin documentation's
# host-less form: (uri, scheme, host, port, user, password, vhost).
SPEC_CASES = [
    ("amqp://user:pass@host:10000/vhost", "amqp", "host", 10000, "user", "pass", "vhost"),
    ("amqp://user%61:%61pass@ho%61st:10000/v%2fhost", "amqp", "hoast", 10000, "usera", "apass",
     "v/host"),
    ("amqp://", "amqp", None, 5672, "guest", "guest", "/"),
    ("amqp://:@/", "amqp", None, 5672, "", "", ""),
    ("amqp://user@", "amqp", None, 5672, "user", "guest", "/"),
    ("amqp://user:pass@", "amqp", None, 5672, "user", "pass", "/"),
    ("amqp://host", "amqp", "host", 5672, "guest", "guest", "/"),
    ("amqp:///vhost", "amqp", None, 5672, "guest", "guest", "vhost"),
    ("amqp://host/", "amqp", "host", 5672, "guest", "guest", ""),
    ("amqp://host/%2f", "amqp", "host", 5672, "guest", "guest", "/"),
    ("amqp://host/%2F", "amqp", "host", 5672, "guest", "guest", "/"),
    ("amqp://[::1]", "amqp", "::1", 5672, "guest", "guest", "/"),
    ("amqp://[::1]:5673/v", "amqp", "::1", 5673, "guest", "guest", "v"),
    ("amqps://host", "amqps", "host", 5671, "guest", "guest", "/"),
    ("amqps://host:5672", "amqps", "host", 5672, "guest", "guest", "/"),
    ("AMQP://Host", "amqp", "Host", 5672, "guest", "guest", "/"),
    ("amqp://host:", "amqp", "host", 5672, "guest", "guest", "/"),
    ("amqp://fred:secret@host1.domain/my_vhost", "amqp", "host1.domain", 5672, "fred", "secret",
     "my_vhost"),
    # Leniencies: a ":" in the password, an unencoded "@" in the user information.
    ("amqp://u:a:b@h", "amqp", "h", 5672, "u", "a:b", "/"),
    ("amqp://u:p@ss@h", "amqp", "h", 5672, "u", "p@ss", "/"),
    ("amqp://u:%E2%82%AC@h/caf%C3%A9", "amqp", "h", 5672, "u", "\u20ac", "caf\u00e9"),
    ("amqp://h/vh@x", "amqp", "h", 5672, "guest", "guest", "vh@x"),
]


@pytest.mark.parametrize("text,scheme,host,port,user,password,vhost", SPEC_CASES)
def test_spec_examples(text: str, scheme: str, host: str | None, port: int, user: str,
                       password: str, vhost: str) -> None:
    uri = parse_uri(text)
    assert (uri.scheme, uri.host, uri.port, uri.username, uri.password, uri.vhost) == (
        scheme, host, port, user, password, vhost)
    assert uri.tls is None
    assert (uri.heartbeat, uri.channel_max, uri.frame_max, uri.connection_timeout) == (
        None, None, None, None)


@pytest.mark.parametrize("text", [c[0] for c in SPEC_CASES] + [
    "amqp://h?heartbeat=5&frame_max=8192&channel_max=10&connection_timeout=2500",
    ("amqps://u:p%2Fw@h:1/v?cacertfile=/c%20a.pem&certfile=/c.pem&keyfile=/k.pem"
     "&verify=verify_none&fail_if_no_peer_cert=true"),
])
def test_format_uri_round_trips(text: str) -> None:
    uri = parse_uri(text)
    assert parse_uri(format_uri(uri)) == uri


def test_query_parameters() -> None:
    uri = parse_uri("amqp://myhost?heartbeat=5&frame_max=8192&channel_max=64"
                    "&connection_timeout=10000")
    assert uri.heartbeat == 5
    assert uri.frame_max == 8192
    assert uri.channel_max == 64
    assert uri.connection_timeout == 10.0  # milliseconds in the URI, seconds in the model
    assert parse_uri("amqp://h?heartbeat=0").heartbeat == 0
    assert parse_uri("amqp://h?channel_max=0&frame_max=0").frame_max == 0
    assert parse_uri("amqp://h?").heartbeat is None
    assert parse_uri("amqp://h?heartbeat=5&").heartbeat == 5


TLS_QUERY = ("cacertfile=/path/to/cacert.pem&certfile=/path/to/certfile.pem"
             "&keyfile=/path/to/keyfile.pem&verify=verify_peer&fail_if_no_peer_cert=false")


def test_tls_all_five() -> None:
    uri = parse_uri(f"amqps://username:password@host:5671/vhost?{TLS_QUERY}")
    assert uri.tls == TLSOptions("/path/to/cacert.pem", "/path/to/certfile.pem",
                                 "/path/to/keyfile.pem", verify=True, fail_if_no_peer_cert=False)
    uri = parse_uri(f"amqps://h?{TLS_QUERY.replace('verify_peer', 'verify_none')}"
                    .replace("=false", "=true"))
    assert uri.tls is not None
    assert uri.tls.verify is False and uri.tls.fail_if_no_peer_cert is True


def test_tls_none_given_is_system_defaults() -> None:
    assert parse_uri("amqps://h").tls is None


# Any subset of the TLS parameters, as amqp_uri:build_ssl_broker/2 takes them (its tests and
# the plugin's documentation: a server-only private CA is cacertfile + verify_peer).
def test_tls_subsets() -> None:
    uri = parse_uri("amqps://h?cacertfile=/ca.pem&verify=verify_peer")
    assert uri.tls == TLSOptions(cacertfile="/ca.pem", verify=True)
    uri = parse_uri("amqps://h?cacertfile=/a&certfile=/b&keyfile=/c&verify=verify_peer")
    assert uri.tls == TLSOptions("/a", "/b", "/c", verify=True)
    uri = parse_uri("amqps://h?certfile=/b&keyfile=/c&password=s%3Acret&depth=3"
                    "&server_name_indication=rabbit.internal&customize_hostname_check=https")
    assert uri.tls is not None
    assert (uri.tls.certfile, uri.tls.password, uri.tls.depth) == ("/b", "s:cret", 3)
    assert uri.tls.server_name_indication == "rabbit.internal" and uri.tls.verify
    assert "s:cret" not in repr(uri) + repr(uri.tls)
    assert parse_uri(format_uri(uri)) == uri  # the state file keeps every TLS option


@pytest.mark.parametrize("text,fragment", [
    ("amqps://h?keyfile=/k.pem", "'keyfile' needs 'certfile'"),
    ("amqps://h?depth=x", "'depth' must be a non-negative integer"),
    ("amqps://h?customize_hostname_check=none", "must be https"),
    ("amqps://h?server_name_indication=", "host name or disable"),
    (f"amqp://h?{TLS_QUERY}", "'cacertfile' is a TLS option: it needs the amqps scheme"),
    ("amqp://h?verify=verify_peer", "'verify' is a TLS option"),
    (f"amqps://h?{TLS_QUERY.replace('verify_peer', 'yes')}", "verify_peer or verify_none"),
    (f"amqps://h?{TLS_QUERY.replace('=false', '=no')}", "must be true or false"),
    (f"amqps://h?{TLS_QUERY.replace('/path/to/keyfile.pem', '')}", "'keyfile' must be a file"),
])
def test_tls_errors(text: str, fragment: str) -> None:
    with pytest.raises(URIError) as info:
        parse_uri(text)
    assert fragment in str(info.value)


BAD_URIS = [
    ("", "expected amqp://"),
    ("host:5672", "expected amqp://"),
    ("http://u:secret@h", "unsupported scheme 'http'"),
    ("amqp://h:0", "port must be a number from 1 to 65535"),
    ("amqp://h:65536", "port must be a number from 1 to 65535"),
    ("amqp://u:secret@h:port", "port must be a number"),
    ("amqp://u:secret", "port must be a number"),  # host forgotten: "secret" is never shown
    ("amqp://h/a/b", "single path segment"),
    ("amqp://h/%zz", "malformed percent-escape in the vhost"),
    ("amqp://u:%zzsecret@h", "malformed percent-escape in the password"),
    ("amqp://u:%ff@h", "password is not valid UTF-8"),
    ("amqp://u:sec/ret@h/v", "unencoded '/', '?' or '#'"),
    ("amqp://u:sec?ret@h", "unencoded '/', '?' or '#'"),
    ("amqp://h#frag", "fragment"),
    ("amqp://h o", "whitespace"),
    ("amqp://h\n", "whitespace"),
    ("amqp://ho<st", "invalid character in the host"),
    ("amqp://::1", "IPv6 address must be written in brackets"),
    ("amqp://[::1", "unterminated '['"),
    ("amqp://[nope]", "not a valid IPv6 address"),
    ("amqp://[::1]x", "unexpected text after the IPv6 literal"),
    ("amqp://h?heartbeat", "'heartbeat' needs a value"),
    ("amqp://h?heartbeat=-1", "'heartbeat' must be a non-negative integer, got '-1'"),
    ("amqp://h?heartbeat=abc", "'heartbeat' must be a non-negative integer"),
    ("amqp://h?heartbeat=70000", "'heartbeat' must be from 0 to 65535, got 70000"),
    ("amqp://h?channel_max=65536", "'channel_max' must be from 0 to 65535"),
    ("amqp://h?frame_max=100", "'frame_max' must be 0 (no limit) or from 4096 to 131072"),
    ("amqp://h?frame_max=1048576", "'frame_max' must be from 0 to 131072"),
    ("amqp://h?connection_timeout=0", "'connection_timeout' must be from 1 to 3600000"),
    ("amqp://h?connection_timeout=3600001", "'connection_timeout' must be from 1 to 3600000, "
                                            "got 3600001"),
    ("amqp://h?heartbeat=" + "9" * 5000, "'heartbeat' must be from 0 to 65535, got 5000 digits"),
    ("amqp://h:" + "9" * 5000, "the port must be a number from 1 to 65535"),
    ("amqp://h/" + "v" * 9000, "a URI must be at most 8192 characters, got 9009"),
    ("amqp://h?connection_timeout=10", "for 10 seconds write 10000"),
    ("amqp://h?heartbeat=1&heartbeat=2", "'heartbeat' is given twice"),
    ("amqp://h?hearbeat=5", "unknown query parameter 'hearbeat'"),
    ("amqp://u:secret@h?auth_mechanism=external", "needs amqps and a certfile"),
    ("amqp://u:secret@h?auth_mechanism=cr_demo", "must be one of plain, amqplain, external"),
    ("amqp://u:secret@h?server_name_indication=x", "is a TLS option: it needs the amqps"),
    # amqp_uri.erl refuses these too (port_requires_host); a host-less URI is the local broker
    ("amqp://:1234", "a port needs a host (port_requires_host)"),
    ("amqp://u:secret@:5672/v", "port_requires_host"),
]


def test_auth_mechanisms() -> None:
    uri = parse_uri("amqp://u:p@h?auth_mechanism=amqplain&auth_mechanism=plain")
    assert uri.auth_mechanisms == ("amqplain", "plain")
    assert parse_uri(format_uri(uri)) == uri
    p = to_pika_parameters(uri, client_name="x")
    assert isinstance(p.credentials, pika.PlainCredentials)
    uri = parse_uri("amqps://h?certfile=/c.pem&keyfile=/k.pem&auth_mechanism=external")
    assert uri.auth_mechanisms == ("external",)


@pytest.mark.parametrize("text,fragment", BAD_URIS)
def test_bad_uris(text: str, fragment: str) -> None:
    with pytest.raises(URIError) as info:
        parse_uri(text)
    assert fragment in str(info.value)
    assert "secret" not in str(info.value) and "secret" not in info.value.uri
    assert issubclass(URIError, ValueError)


def test_error_quotes_the_uri_redacted() -> None:
    with pytest.raises(URIError) as info:
        parse_uri("amqp://fred:s3cr3t@host/v?heartbeat=x")
    assert str(info.value).startswith("invalid AMQP URI 'amqp://fred:***@host/v?heartbeat=x': ")
    assert info.value.uri == "amqp://fred:***@host/v?heartbeat=x"
    assert "s3cr3t" not in str(info.value)


def test_non_string() -> None:
    with pytest.raises(URIError, match="must be a string"):
        parse_uri(5)  # type: ignore[arg-type]  # deliberately wrong


@pytest.mark.parametrize("text,expected", [
    ("amqp://fred:secret@host/v", "amqp://fred:***@host/v"),
    ("amqps://fred:secret@host:5671/v?heartbeat=5", "amqps://fred:***@host:5671/v?heartbeat=5"),
    ("AMQP://fred:secret@host", "AMQP://fred:***@host"),
    ("amqp://fred@host/v", "amqp://fred@host/v"),
    ("amqp://host/v", "amqp://host/v"),
    ("amqp://:secret@host", "amqp://:***@host"),
    ("amqp://:@host", "amqp://:***@host"),
    ("amqp://u:p%40ss@h", "amqp://u:***@h"),
    ("amqp://u:p@ss@h/v", "amqp://u:***@h/v"),
    ("amqp://u:sec/ret@h/v", "amqp://u:***@h/v"),
    ("amqp://u:sec?ret@h", "amqp://u:***@h"),
    ("amqp://u:secret", "amqp://u:***"),
    ("amqp://h:5672/v@x", "amqp://h:***@x"),  # refused by the parser: may end a password
    ("amqp://h/v@x", "amqp://h/v@x"),
    ("connecting to amqp://a:secret@h1/v, then 'amqps://b:secret@h2' failed",
     "connecting to amqp://a:***@h1/v, then 'amqps://b:***@h2' failed"),
    ("<amqp://a:secret@h1>", "<amqp://a:***@h1>"),
    ("http://a:secret@web/x", "http://a:***@web/x"),
    # No URI, and a password no URI has registered: left alone (registered ones go anywhere).
    ("no uri here: user:unregistered@host", "no uri here: user:unregistered@host"),
    ("", ""),
])
def test_redact(text: str, expected: str) -> None:
    assert redact(text) == expected
    assert redact(redact(text)) == expected


def test_redact_agrees_with_model_redacted() -> None:
    uri = parse_uri("amqp://fred:secret@host/v")
    assert "secret" not in uri.redacted()
    assert "secret" not in repr(uri)
    assert "secret" not in redact(format_uri(uri))


def test_pika_parameters_basic() -> None:
    uri = parse_uri("amqp://fred:secret@host1:5673/my_vhost")
    p = to_pika_parameters(uri, client_name="pumpd orders source")
    assert isinstance(p, pika.ConnectionParameters)
    assert (p.host, p.port, p.virtual_host) == ("host1", 5673, "my_vhost")
    assert isinstance(p.credentials, pika.PlainCredentials)
    assert (p.credentials.username, p.credentials.password) == ("fred", "secret")
    assert p.client_properties == {"connection_name": "pumpd orders source"}
    assert p.socket_timeout == 10.0
    assert p.stack_timeout == 15.0
    assert p.blocked_connection_timeout is None
    assert p.connection_attempts == 1
    assert p.ssl_options is None
    assert p.heartbeat is None  # the broker's proposal
    assert p.channel_max == pika.ConnectionParameters.DEFAULT_CHANNEL_MAX
    assert p.frame_max == pika.ConnectionParameters.DEFAULT_FRAME_MAX


def test_pika_parameters_local_broker_and_empty_vhost() -> None:
    p = to_pika_parameters(parse_uri("amqp://"), client_name="x")
    assert (p.host, p.port, p.virtual_host) == ("127.0.0.1", 5672, "/")
    assert to_pika_parameters(parse_uri("amqp://h/"), client_name="x").virtual_host == ""


def test_pika_parameters_query() -> None:
    uri = parse_uri("amqp://h?heartbeat=5&frame_max=8192&channel_max=64&connection_timeout=4000")
    p = to_pika_parameters(uri, client_name="x")
    assert (p.heartbeat, p.frame_max, p.channel_max) == (5, 8192, 64)
    assert (p.socket_timeout, p.stack_timeout) == (4.0, 4.0)
    p = to_pika_parameters(parse_uri("amqp://h?connection_timeout=30000&heartbeat=0"),
                           client_name="x")
    assert (p.socket_timeout, p.stack_timeout, p.heartbeat) == (10.0, 30.0, 0)
    p = to_pika_parameters(parse_uri("amqp://h?channel_max=0&frame_max=0"), client_name="x")
    assert p.channel_max == 65535 and p.frame_max == 131072  # 0 = no limit: pika's maximum


def test_pika_parameters_amqps_system_defaults() -> None:
    p = to_pika_parameters(parse_uri("amqps://broker.example"), client_name="x")
    assert p.port == 5671
    assert p.ssl_options is not None
    ctx = p.ssl_options.context
    assert isinstance(ctx, ssl.SSLContext)
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert p.ssl_options.server_hostname == "broker.example"


def test_pika_parameters_amqps_missing_file(tmp_path: Path) -> None:
    q = (f"cacertfile={tmp_path / 'nope.pem'}&certfile=/c.pem&keyfile=/k.pem"
         "&verify=verify_peer&fail_if_no_peer_cert=false")
    with pytest.raises(URIError, match="cannot load the TLS files") as info:
        to_pika_parameters(parse_uri(f"amqps://u:secret@h?{q}"), client_name="x")
    assert "secret" not in str(info.value)


def test_model_uri_is_frozen_value() -> None:
    a, b = parse_uri("amqp://u:p@h/v"), parse_uri("amqp://u:p@h:5672/v")
    assert a == b and isinstance(a, BrokerURI)


# amqp_client's own URI cases (deps/amqp_client/test/unit_SUITE.erl, amqp_uri_parsing): the same
# verdict from pumpd. Host-less URIs are the local broker here, a direct connection
# there.
AMQP_CLIENT_ACCEPTS = [
    "amqp://user:pass@host:10000/vhost?heartbeat=5", "amqp://", "amqp://:@/",
    "amqp://localhost:1234", "amqp://:@host/", "amqp://user@", "amqp://user:pass@localhost",
    "amqp://host", "amqp://localhost:10000", "amqp:///vhost", "amqp://host/", "amqp://host/%2f",
    "amqp://[::1]", "amqp://host:100", "amqp://[::1]:100", "amqp://host/blah",
    "amqp://host:100/blah", "amqp://[::1]/blah", "amqp://[::1]:100/blah",
    "amqp://user:pass@host", "amqp://user:pass@host:100", "amqp://user:pass@[::1]",
    "amqp://user:pass@[::1]:100", "amqps://localhost:5671",
    "amqps://host1/%2f?cacertfile=/path/to/cacertfile.pem",
    "amqps://host3/%2f?verify=verify_peer&fail_if_no_peer_cert=true",
    "amqps://user:pass@host4/%2f?cacertfile=/path/to/cacertfile.pem"
    "&certfile=/path/to/certfile.pem&password=topsecret&depth=5",
    "amqps://host7/%2f?server_name_indication=disable",
    "amqps://127.0.0.1/%2f?server_name_indication=disable&verify=verify_none",
    "amqps://host10/%2f?server_name_indication=host10&verify=verify_none",
    "amqps://host11/%2f?cacertfile=/path/to/cacertfile.pem&verify=verify_peer"
    "&customize_hostname_check=https",
    "amqp://host/?auth_mechanism=plain", "amqp://host/?auth_mechanism=amqplain",
]


AMQP_CLIENT_REFUSES = [
    "amqp://:1234", "amqps://:5671", "https://www.rabbitmq.com", "amqp://foo:bar:baz",
    "amqp://foo[::1]",
    "amqp://foo:[::1]", "amqp://[::1]foo", "amqp://foo:1000xyz", "amqp://foo:1000000",
    "amqp://foo/bar/baz", "amqp://foo%1", "amqp://foo%1x", "amqp://foo%xy",
    "amqps://host/%2f?customize_hostname_check=bogus",
    "amqp://host/?auth_mechanism=zzz_fake_mod:plain",
]


@pytest.mark.parametrize("text", AMQP_CLIENT_ACCEPTS)
def test_amqp_client_accepts(text: str) -> None:
    parse_uri(text)


@pytest.mark.parametrize("text", AMQP_CLIENT_REFUSES)
def test_amqp_client_refuses(text: str) -> None:
    with pytest.raises(URIError):
        parse_uri(text)


def test_amqp_client_tls_options() -> None:
    tls = parse_uri("amqps://user:pass@host4/%2f?cacertfile=/path/to/cacertfile.pem"
                    "&certfile=/path/to/certfile.pem&password=topsecret&depth=5").tls
    assert tls == TLSOptions(cacertfile="/path/to/cacertfile.pem",
                             certfile="/path/to/certfile.pem", password="topsecret", depth=5)


def test_frame_limits_are_pikas() -> None:
    # config/uri.py spells pika's frame limits out so that parsing a URI does not import pika
    import pika.spec

    assert (FRAME_MIN_SIZE, FRAME_MAX_SIZE) == (pika.spec.FRAME_MIN_SIZE, pika.spec.FRAME_MAX_SIZE)

